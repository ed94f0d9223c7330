"""The one home of every default. YAML files and `key=value` overrides only change these.

Each actor receives its own section (a typed dataclass), never the whole tree.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Literal


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
    # Trajectories written to trajectories/*.jsonl per step (a sample, not all).
    trajectories_per_step: int = 8
    # The driver's supervisor (actors/supervisor.py): when the collector or a trainer shard dies or
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
class ModelConfig:
    # A Hugging Face model directory; empty builds the tiny Qwen3 model below (cached).
    path: str = ""
    cache_dir: str = "~/.cache/swerve"
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 384
    max_position_embeddings: int = 4096
    seed: int = 0


@dataclass
class TokenizerConfig:
    # A Hugging Face tokenizer directory; empty trains the offline byte-level BPE (cached).
    path: str = ""
    cache_dir: str = "~/.cache/swerve"
    vocab_size: int = 2048


@dataclass
class SimEngineConfig:
    """engine.backend=sim: an engine that costs time, not compute (benchmarks of the control plane).

    A decode step of b running requests takes step_base_s + step_per_request_s * b, as a real
    engine's does (a fixed cost per step plus a per-sequence one), so batching pays and a batch
    that drains in the tail runs nearly idle. Its replies are a scripted agent's: each trajectory
    draws a plan at its first turn (turns, tokens per turn) and carries it in its replies.
    The defaults are `swerve bench async_vs_sync`'s reference workload (with rollout.max_turns=10)."""
    step_base_s: float = 0.003
    step_per_request_s: float = 0.0005
    # Share of trajectories that never submit (they end at rollout.max_turns).
    cap_fraction: float = 0.84
    # The others submit at a turn drawn uniformly from [submit_turn_min, submit_turn_max].
    submit_turn_min: int = 6
    submit_turn_max: int = 10
    # Tokens per reply, drawn once per trajectory: "uniform" in [min, max], or "pareto" (shape
    # tokens_pareto_shape, scale min, cut at max) for a heavy tail of long trajectories.
    tokens_per_turn_min: int = 24
    tokens_per_turn_max: int = 60
    tokens_distribution: Literal["uniform", "pareto"] = "uniform"
    tokens_pareto_shape: float = 1.5
    # The command each non-final turn runs in the sandbox.
    command: str = "ls"
    # Decoding pauses this long while new weights load.
    weight_update_s: float = 0.0


# Engine backends: "cpu" our server (python -m policies.server); "sglang" a real SGLang server
# (GPU); "sim" a simulated engine in the actor itself (engine.sim; benchmarks). Each has its
# server command in policies/server/process.py SERVER_COMMANDS and its actor class in
# actors/remote.py REMOTE_ENGINES ("sim" has no server).
EngineBackend = Literal["cpu", "sglang", "sim"]


@dataclass
class EngineConfig:
    """Engine settings, and the defaults of the CPU server's flags (policies/server/options.py)."""
    backend: EngineBackend = "cpu"
    num_engines: int = 2
    # Most requests the server decodes at once (CPU server: --max-running-requests).
    max_batch_size: int = 16
    # Per-request cap on prompt + generated tokens (SGLang --context-length): a request at the
    # cap ends with finish reason "length", so one runaway request cannot starve the others.
    max_context_tokens: int = 4096
    torch_threads: int = 1
    # backend cpu: KV tokens of finished requests the server keeps so a conversation's next turn
    # prefills only its new tokens (8 KiB a token for the embedded default's model; 0: off).
    # SGLang's radix cache does this on its own.
    prefix_cache_tokens: int = 16384
    # SGLang --mem-fraction-static and --tp-size (backend sglang).
    mem_fraction: float = 0.85
    tp_size: int = 1
    # How in-flight requests are held during a weight update when the server tags every token
    # with its version (ours; SGLang >= 0.5.23 with its weight_versions spans): "retract" (KV
    # recomputed with the new weights) or "in_place" (KV kept). Servers without per-token
    # versions (older SGLang) are paused with "abort" and each request resumes from its partial
    # output, so versions stay exact.
    pause_mode: Literal["retract", "in_place"] = "retract"
    # Which requests an engine serves first when it cannot serve all: "fifo" arrival order;
    # "age" (straggler-first) the oldest trajectories (the policy version of their oldest token,
    # then their start time), so the ones that hold a batch back at the staleness bound finish
    # sooner. SGLang: --enable-priority-scheduling and each request's `priority` (larger first).
    # fifo is the default because age did not pay here: in 3 paired runs of `swerve bench
    # async_vs_sync` (staleness 2) age reached 0.876 of the ideal bound on the reference
    # workload against fifo's 0.915, and 0.784 against 0.770 on heavy_tail (within noise).
    priority: Literal["age", "fifo"] = "fifo"
    # backend cpu: a waiting request preempts the lowest-priority running one when the batch is
    # full and its priority is higher by more than this (SGLang's flag of the same name). Age
    # priorities differ by 10 per second of start time and by far more per policy version.
    priority_preemption_threshold: int = 10
    # Where weight updates are written as safetensors for /update_weights_from_disk;
    # empty: /dev/shm when writable, else the system temporary directory.
    weights_dir: str = ""
    # Bounded wait for the server's /health after it starts.
    startup_timeout_s: float = 300.0
    # Client-side limit on one HTTP call to the server (a generation included).
    request_timeout_s: float = 3600.0
    # How often the driver checks that every engine is alive (dead ones are replaced).
    health_interval_s: float = 2.0
    # Concurrent calls one engine actor takes (Ray threads; each waits on the server).
    max_concurrency: int = 1024
    # Extra command-line arguments for the server process.
    server_args: List[str] = field(default_factory=list)
    sim: SimEngineConfig = field(default_factory=SimEngineConfig)


# Trainer backends (policies/trainer_backend.py BACKENDS holds each one's class): "torch" the HF
# model, data parallel; "megatron" megatron-core (TP/EP); "sim" one scalar parameter whose step
# takes trainer.sim_step_s (benchmarks).
TrainerBackend = Literal["torch", "megatron", "sim"]
# How per-token losses become the batch loss (policies.losses.grpo_loss).
LossAggregation = Literal["token_mean", "seq_mean"]


@dataclass
class TrainerConfig:
    backend: TrainerBackend = "torch"
    # backend sim: seconds one train step takes (the forward and backward of the model it stands in for).
    sim_step_s: float = 1.0
    num_shards: int = 1
    total_steps: int = 3
    lr: float = 1e-5
    weight_decay: float = 0.0
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    max_grad_norm: float = 1.0
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.28
    kl_coef: float = 0.0
    # How per-token losses become the batch loss (policies.losses): "token_mean" (every token
    # weighs the same; long failing trajectories then push shared tokens down) | "seq_mean"
    # (every trajectory weighs the same).
    loss_aggregation: LossAggregation = "token_mean"
    # Passes over each batch, and optimizer steps per pass (the batch split into this many
    # minibatches). With 1 x 1 the PPO ratio is exactly 1 and clipping never acts; more steps reuse
    # each expensive rollout, clipped against the log-probs from before the first step.
    ppo_epochs: int = 1
    minibatches: int = 1
    # Linear learning-rate warm-up over the first this many updates (policy versions); 0: none.
    lr_warmup_steps: int = 0
    torch_threads: int = 1
    # Rendezvous address of rank 0; loopback keeps a one-node run off the network.
    master_addr: str = "127.0.0.1"
    # 0 picks a free port for the rendezvous.
    master_port: int = 0
    # Truncated importance weight cap: exp(proximal - behavior) is clamped to at most this.
    tis_cap: float = 2.0
    # dtype the trainer holds parameters in and computes with: "float32" | "bfloat16" | "float16".
    params_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    # megatron backend only: tensor / expert model-parallel sizes (each divides num_shards; the
    # data-parallel size is num_shards / tensor_parallel_size).
    tensor_parallel_size: int = 1
    expert_parallel_size: int = 1
    # megatron backend only: MoE load-balancing auxiliary loss coefficient (0: router untouched).
    moe_aux_loss_coeff: float = 0.0
    # megatron backend only: pad the vocabulary to a multiple of this x tensor_parallel_size.
    vocab_multiple: int = 1
    # megatron backend only: recompute each transformer layer in backward (less activation memory).
    recompute_activations: bool = False
    # Gradients are all-reduced over the data-parallel group in buckets of this many MiB.
    grad_bucket_mb: int = 256
    # Checkpoints kept under runs/<name>/checkpoints (older ones are deleted after a save).
    keep_checkpoints: int = 3
    # When the driver saves a checkpoint (actors.restart.CheckpointCadence): after the last step,
    # and whenever either cadence below is due. By time is the default, because what a crash
    # costs is wall time: at most this many seconds of training (plus the step in progress)
    # are lost. Counted from the end of the previous save (or the run's start); 0: off.
    checkpoint_every_s: float = 600.0
    # Also every this many steps (step % interval == 0); 0: off.
    checkpoint_interval: int = 0
    # NCCL weight broadcast to engines: tensors per update call, in buckets of this many MiB.
    weight_bucket_mb: int = 512


@dataclass
class SFTConfig:
    # OpenAI-style JSONL: one {"messages": [...], "tools": [...]?, "resolved": bool?} per line.
    data: str = ""
    # The HF model directory written (weights, config, tokenizer); use it as model.path.
    out_dir: str = "runs/sft"
    lr: float = 5e-4
    batch_size: int = 16
    epochs: int = 1
    # Stop after this many optimizer steps (0: run all epochs).
    max_steps: int = 0
    # Longer conversations are truncated to this many tokens.
    max_seq_tokens: int = 2048
    # Loss on every token, not only the assistant's (helped the tiny model; see LEARNING.md).
    loss_on_all_tokens: bool = False
    # Keep only traces whose "resolved" flag is true (traces without the flag are kept).
    filter_resolved: bool = True
    seed: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0


@dataclass
class RolloutConfig:
    mode: str = "async"
    max_staleness: int = 1
    num_episode_actors: int = 4
    group_size: int = 4
    groups_per_batch: int = 2
    temperature: float = 1.0
    top_p: float = 1.0
    max_turns: int = 4
    max_tokens_per_turn: int = 48
    max_total_tokens: int = 2048
    max_episode_seconds: float = 300.0
    # At the end of a run, how long episodes still running may finish (their results are counted)
    # before their actors are ended.
    shutdown_grace_s: float = 300.0
    max_infra_retries: int = 2
    normalize_advantage_std: bool = False
    # Dynamic sampling: drop complete groups whose members all got the same reward (zero
    # advantage, no learning signal) and admit new ones in their place, so every batch holds
    # `groups_per_batch` groups with mixed rewards. Counted as `filtered_uniform`.
    drop_uniform_groups: bool = False
    # Which task the collector admits next (actors/task_picker.py): "uniform" (a shuffled pass
    # over every task) | "pass_rate" (the task whose decayed success estimate is nearest 0.5, so
    # groups have mixed rewards; unseen tasks keep being explored).
    task_selection: str = "uniform"
    # pass_rate: evidence about a task halves in weight every this many policy versions.
    pass_rate_half_life_versions: float = 4.0
    # pass_rate: share of admissions that go to a task not seen yet, whatever the estimates say.
    explore_fraction: float = 0.1
    # train_pass_rate (metric) is the mean reward of this many most recent scored trajectories.
    pass_rate_window: int = 128
    # How long an idle episode actor waits before asking the collector again.
    poll_interval_s: float = 0.05


@dataclass
class SWEEnvConfig:
    """swerve/SWE-v0's own settings (env.swe). Its sandbox is the run's: every command runs under
    sandbox.command_timeout_s, in a lease built from sandbox.*; the tasks it picks when reset gets
    none are tasks.source / tasks.split. env.kwargs entries with these names override them."""
    # Observations (command output, the grading report) are cut in the middle to this many characters.
    max_observation_chars: int = 2000
    # This many replies in a row without one bash block end the episode as format_error.
    max_consecutive_format_errors: int = 3
    # Time limit of the grading test run (FAIL_TO_PASS + PASS_TO_PASS, and applying test_patch).
    # A real repository's suite can take minutes (SWE-bench's harness allows 1800 s); a run that
    # hits the limit scores unresolved. A recipe of small suites lowers it, so an edit that makes
    # the tests loop forever costs a minute, not half an hour.
    grade_timeout_s: float = 1800.0
    # Time limit of listing the workspace (system side: before the agent's first command, and
    # when its change is read at grading). A repository too big to list in it is an infra error
    # at the start; a workspace the agent made unlistable scores 0 at grading.
    listing_timeout_s: float = 60.0
    # A change to a protected path (envs/protection.py) scores 0 outright; false grades the
    # rest of the change. Either way the attempt records the paths (info["tampered"]).
    tamper_scores_zero: bool = True


@dataclass
class EnvConfig:
    # Any id gymnasium.make accepts, including "module:Env-v0".
    id: str = "swerve/SWE-v0"
    # Handed to the env's constructor (envs/make.py). For swerve/SWE-v0 they override env.swe.
    kwargs: Dict[str, Any] = field(default_factory=dict)
    system_prompt: str = (
        "You are a software engineer fixing a bug in a Python repository. "
        "Reply with exactly one ```bash block holding one command. "
        "Run `submit` in a bash block when the tests pass."
    )
    swe: SWEEnvConfig = field(default_factory=SWEEnvConfig)


@dataclass
class TasksConfig:
    # "builtin" (hand-written suite), "micro" (generated one-function tasks for tiny models), or a
    # path to a task file or directory (SWE-bench / SWE-smith rows, Harbor tasks).
    source: str = "builtin"
    # Format of a path source; "" detects it from the path.
    format: str = ""
    split: str = "train"
    # Written by `swerve tasks validate`; training skips the tasks it lists. "" = the default
    # location for the source (under the swerve cache).
    quarantine_file: str = ""
    # Empty means every task of the split.
    ids: List[str] = field(default_factory=list)


@dataclass
class SynthConfig:
    """`swerve tasks synth` (envs/synth): SWE-smith-style bug tasks made from a local repository.
    Not part of a run's Config: the command's flags take their defaults from here."""
    # Tasks to keep (validated mutations).
    num_tasks: int = 10
    # Seeds which mutations are tried, in what order, and the PASS_TO_PASS sample.
    seed: int = 0
    # Bound on the whole synthesis, the two baseline runs of the suite included.
    timeout_s: float = 1800.0
    # Bound on one test run of a mutated copy; 0: run_timeout_factor x the slower baseline run
    # + run_timeout_margin_s (a mutation that makes the suite loop is cut off, not waited for).
    per_run_timeout_s: float = 0.0
    run_timeout_factor: float = 3.0
    run_timeout_margin_s: float = 10.0
    # PASS_TO_PASS tests kept per task (a seeded sample when more still pass).
    max_p2p: int = 20
    # Mutator families tried (envs/synth/mutators.py FAMILIES); empty: every family.
    families: List[str] = field(default_factory=list)
    # Interpreter that runs the repository's tests; "": the one running swerve.
    python: str = ""
    # Stop after trying this many mutations; 0: no limit (only num_tasks and timeout_s stop it).
    max_candidates: int = 0
    # The problem statement details this many failing tests and lists at most max_listed.
    max_detailed_failures: int = 3
    max_listed_failures: int = 10


# Sandbox backends (actors/sandbox_actor.py builds each from its SandboxConfig).
SandboxBackend = Literal["local", "docker", "e2b"]
SandboxIsolation = Literal["auto", "bwrap", "none"]
SandboxCgroup = Literal["auto", "required", "off"]


@dataclass
class SandboxConfig:
    backend: SandboxBackend = "local"
    # "auto" uses bubblewrap when installed, "bwrap" requires it, "none" runs unisolated.
    isolation: SandboxIsolation = "auto"
    memory_mb: int = 2048
    max_processes: int = 256
    max_file_mb: int = 64
    # Time limit of one agent command (the env passes none of its own); grading has its own
    # limit, env.swe.grade_timeout_s.
    command_timeout_s: float = 20.0
    max_output_bytes: int = 1_000_000
    # Empty uses the system temporary directory.
    workdir_root: str = ""
    # Per-lease cgroup (local backend) holding pids.max=max_processes and a memory limit of
    # memory_mb over all of the lease's processes: as root RLIMIT_NPROC is not enforced, so
    # only a cgroup contains a fork bomb. "auto" uses one when the cgroup fs is writable
    # (else warns once), "required" fails the lease without one, "off" never uses one.
    cgroup: SandboxCgroup = "auto"
    # Warm pool: ready leases kept per task (workspace copied, probe run) so start() of a
    # task seen before takes one and refills in the background; 0 turns the pool off.
    pool_size: int = 1
    # How many distinct tasks keep ready leases (least recently started are dropped first).
    pool_tasks: int = 4
    # A ready lease older than this is closed instead of used (remote leases expire).
    pool_max_idle_s: float = 120.0
    # Where the repository lives inside a container (docker, e2b): a task without an image
    # is uploaded there; images that ship the repo elsewhere (SWE-bench: /testbed) set it.
    container_workdir: str = "/workspace"
    # E2B template used when a task has no image of its own.
    e2b_template: str = "base"
    # E2B sandbox lifetime in seconds, renewed (set_timeout) while the lease is used, so a
    # sandbox whose owner died expires on its own shortly after.
    e2b_timeout_s: int = 300
    # Outbound internet for E2B sandboxes: off, like the local and docker backends.
    e2b_allow_internet: bool = False
    # vCPUs of one sandbox (the reference run: 2). E2B fixes CPU and memory in the template
    # (`e2b template build --cpu-count 2 --memory-mb 4096`), so this records the recipe and feeds
    # the placement plan (actors/placement_plan.py); no backend enforces it yet. 0 = unspecified.
    vcpus: int = 0
    # Image for docker leases of tasks without an image of their own.
    docker_image: str = "python:3.11-slim"
    # User commands run as inside the container ("" keeps the image's user).
    docker_user: str = "1000:1000"
    # How long one docker CLI call (inspect, cp, rm; not a command, which has its own timeout)
    # may wait for the daemon before the lease is an infra error.
    docker_cli_timeout_s: float = 120.0


@dataclass
class EvalConfig:
    # Attempts per task (pass@k is reported for k = 1..attempts).
    attempts: int = 4
    # Split of tasks.source evaluated ("all": every task of the source).
    split: str = "eval"
    temperature: float = 0.3
    # Tasks evaluated: a subset stratified by Task.stratum (proportional), 0 = every task.
    num_tasks: int = 0
    # Seeds the stratified subset and the attempts' sampling seeds.
    seed: int = 0
    # Where eval.json and predictions.jsonl go; "" = runs/<run.name>/ (run.dir).
    out_dir: str = ""
    # `model_name_or_path` in predictions.jsonl; "" = model.path (or "swerve-tiny").
    model_name: str = ""


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
class PipelineConfig:
    # Expert traces written per training task for the SFT stage.
    traces_per_task: int = 2
    # Training tasks (first by id) that get expert traces; 0 = every task of tasks.split.
    trace_tasks: int = 0
    # Expert replies start with a one-line thought before the bash block (costs ~8 tokens a turn).
    expert_thoughts: bool = True
    # Processes that play expert traces (each runs real commands in a sandbox); 0 = one per CPU.
    trace_workers: int = 0
    # Share of the traces that show a wrong edit, its failing test and the recovery.
    recovery_rate: float = 0.3
    # The RL stage trains on the training tasks that got no expert trace (true), or on all of them.
    rl_on_unseen_tasks: bool = True
    # Stages run by `swerve pipeline`, in order.
    stages: List[str] = field(default_factory=lambda: ["base", "sft", "rl"])
    # A re-run skips each stage that finished with the same config (its <stage>/done.json) and
    # resumes RL from its newest checkpoint; true runs every stage again from scratch.
    fresh: bool = False


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
    # The GPU placement groups of a run must be ready within this (actors/placement.py): GPUs
    # the cluster declares but others hold are reported, not waited on forever.
    placement_s: float = 600.0


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    deadlines: DeadlinesConfig = field(default_factory=DeadlinesConfig)
