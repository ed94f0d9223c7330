"""Where a run's files go, how it is watched, supervised and bounded in time, and its Ray."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Literal


# Where each step's metrics go (actors/report/loggers.py). jsonl: runs/<name>/metrics.jsonl, the run
# directory's record, always written (plots and --resume read it); tensorboard: event files under
# runs/<name>/tensorboard; wandb: a Weights & Biases run under runs/<name>/wandb (WANDB_MODE=offline
# keeps it local; an unreachable service falls back to offline, never failing the run).
RunLogger = Literal["jsonl", "tensorboard", "wandb"]


@dataclass
class RunConfig:
    name: str = "default"
    dir: str = "runs"
    seed: int = 0
    # Continue from the newest checkpoint under runs/<name>/checkpoints (also `swerve train --resume`).
    resume: bool = False
    status_interval_s: float = 5.0
    # The run's PNG plots (actors/report/plots.py) are drawn after the last step and, during the
    # run, at most this often (0: only at the end): drawing them costs the driver's loop ~1-1.5 s
    # of CPU, which once per checkpoint was a third of a short step.
    plot_every_s: float = 300.0
    # Trajectories written to trajectories/*.jsonl per step (a sample, not all).
    trajectories_per_step: int = 8
    # The driver's supervisor (actors/fleet/supervisor.py): when the collector or a trainer shard dies or
    # hangs, the run rolls back to its newest checkpoint and goes on, at most this many times per
    # role and max_restarts_total in all; past that it exits naming the role, the cause and the
    # --resume command. Engines, episode actors and sandboxes are replaced where they die.
    max_restarts: int = 3
    max_restarts_total: int = 6
    loggers: List[RunLogger] = field(default_factory=lambda: ["jsonl"])

    @property
    def path(self) -> Path:
        """runs/<name>: the run's directory (its logs in logs/, see actors/report/console.py)."""
        return Path(self.dir).expanduser().resolve() / self.name


@dataclass
class RayConfig:
    # Empty starts a local Ray (or joins the one RAY_ADDRESS names, as `ray job submit` sets).
    address: str = ""
    # Empty uses "swerve-<run.name>".
    namespace: str = ""
    num_cpus: int = 0
    # Custom Ray resources that place each role on its own kind of node (e.g. sandboxes on CPU
    # nodes that declare `--resources '{"sandbox": 1000}'`); empty places the role anywhere.
    sandbox_resource: str = ""
    engine_resource: str = ""
    trainer_resource: str = ""
    # GPUs of one GPU node as the placement plan assumes before launch (`swerve plan`); at launch
    # Ray's placement groups decide the nodes, on whatever GPUs the cluster's nodes declare.
    gpus_per_node: int = 8
    # A local Ray (no address) starts its dashboard on 127.0.0.1, here (0: Ray's 8265, or the next
    # free port), and the run prints its URL once; false starts none. A joined cluster has its own.
    dashboard: bool = True
    dashboard_port: int = 0


@dataclass
class FaultsConfig:
    # Every knob is a probability in [0, 1]; 0 (the default) injects nothing. Each injected fault
    # must end its episode as infra_error with a source, never be trained, and its member re-run.
    # Per sandbox call: the sandbox actor is killed (ray.kill) under the call.
    sandbox_kill_rate: float = 0.0
    # Per LLM call: the router fails the call as an engine error.
    llm_error_rate: float = 0.0
    # Per sandbox lease start: the start fails, as a backend that cannot start a sandbox would.
    sandbox_start_fail_rate: float = 0.0
    # Per training step: the driver kills one engine actor (ray.kill) while rollouts are generating.
    engine_kill_rate: float = 0.0
    # Per grading: the sandbox actor running the tests is killed under the grader.
    grader_crash_rate: float = 0.0


@dataclass
class DeadlinesConfig:
    """Every deadline after which a role that is alive but silent counts as dead (actors/), in
    one place. They bound hangs, not work: each must exceed the slowest honest call of its kind
    (a 30B weight sync, a long generation, a big checkpoint); raise them for large models.
    Sandbox commands and the grader's test run have their own limits (sandbox.command_timeout_s,
    env.swe.grade_timeout_s) plus sandbox_margin_s."""
    # An engine's server must answer /health within this (the engine set probes every
    # engine.health_interval_s); after engine_health_misses unanswered probes in a row the
    # engine counts as hung and is killed and replaced (one miss may be a busy CPU, not a hang).
    engine_health_s: float = 10.0
    engine_health_misses: int = 3
    # A replaced engine's name must be free for its replacement within this (Ray releases a dead
    # actor's name asynchronously).
    engine_replace_s: float = 30.0
    # Before an abort-mode weight update, the generate calls under way must come back within this.
    engine_drain_s: float = 60.0
    # One generate call, seen from an episode (a hung one fails as infra_error and is re-run).
    generate_s: float = 3600.0
    # Pushing weights into one engine (pause, load, resume); a hung engine is replaced.
    weight_sync_s: float = 1800.0
    # One optimizer update on the trainer shards (a shard stuck in a collective never returns).
    train_step_s: float = 3600.0
    # A call into the collector (next batch, books, snapshot).
    collector_call_s: float = 300.0
    # Saving or loading a checkpoint.
    checkpoint_s: float = 1800.0
    # Room above a sandbox call's own time limit before its actor counts as hung.
    sandbox_margin_s: float = 30.0
    # A new sandbox actor's process must be up (its worker started, its class built) within this,
    # before its first call's own deadline starts. Ray starts a node's workers a few at a time (as
    # many as it has CPUs), so a burst of episodes starting queues here; a kill at a short deadline
    # would only add another start to the queue (measured: at 128 episodes on 2 cores, half the
    # sandbox actors never came up inside 600 s).
    sandbox_up_s: float = 600.0
    # The longest an agent harness's request waits in the session gateway for its answer
    # (swerve/Harness-v0). Timeouts nest: sandbox.command_timeout_s < env.harness.step_timeout_s
    # < rollout.max_episode_seconds < this, so a cap always ends an episode before a request dies.
    gateway_request_s: float = 7200.0
    # The session gateway's own event loop opening or closing a listener.
    gateway_step_s: float = 30.0
    # The GPU placement groups of a run must be ready within this (actors/cluster/placement.py): GPUs
    # the cluster declares but others hold are reported, not waited on forever.
    placement_s: float = 600.0
    # The run-level watchdog (actors/fleet/watchdog.py): no scored trajectory finished (infra errors are
    # no progress) and no step completed for this long while the driver waits for a batch, and the
    # run dumps who waits on what and rolls back as for a dead role. Above the longest honest episode (rollout.max_episode_seconds) plus its
    # grading (env.swe.grade_timeout_s).
    progress_s: float = 3600.0
