"""Start Ray and build every actor of a run from its config (named by role and index)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Union

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from policies.training.checkpoint import PAUSE_ENV
from policies.seeds import derive_seed
from actors.engines.engine_router import EngineRouter
from actors.episodes.faults import FaultPlan
from actors.episodes.gateway import GatewaySpec
from actors.fleet.engine_set import EngineSet
from actors.cluster.placement import Placement
from actors.cluster.placement_plan import build_plan
from actors.report import console
from actors.fleet.remote import NamedEngines, RemoteCollector, RemoteEpisode, SandboxLease, engine_call, remote_trainer
from actors.cluster.roles import CollectorRole, EpisodeLoops, TrainerGroup, WorkSource
from configs import Config
from configs.schema import RolloutConfig
from envs.make import env_sandbox
from envs.outcomes import InfraSource
from envs.tasks.stream import TaskStream


def namespace(cfg: Config) -> str:
    return cfg.ray.namespace or f"swerve-{cfg.run.name}"


def _runtime_env() -> dict:
    # Every worker redacts secrets from its logs and prints, as the driver does (actors/report/redact.py).
    env: dict = {"worker_process_setup_hook": "actors.report.redact.install"}
    # The checkpoint-pause test hook acts in the trainer processes, not in the driver's.
    pause_s = os.environ.get(PAUSE_ENV)
    if pause_s:
        env["env_vars"] = {PAUSE_ENV: pause_s}
    return env


def init_ray(cfg: Config) -> None:
    """Join the cluster named by ray.address / RAY_ADDRESS (as `ray job submit` sets), else start one."""
    if ray.is_initialized():
        return
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS", "")
    if address:
        ray.init(address=address, namespace=namespace(cfg), runtime_env=_runtime_env())
    else:
        # address="local": always a private instance, never a cluster someone else started here.
        # Its dashboard listens on loopback only (README, "Exposing the dashboard and engines safely").
        context = ray.init(address="local", num_cpus=cfg.ray.num_cpus or None, namespace=namespace(cfg),
                           runtime_env=_runtime_env(), include_dashboard=cfg.ray.dashboard,
                           dashboard_host="127.0.0.1", dashboard_port=cfg.ray.dashboard_port or None,
                           _node_ip_address="127.0.0.1")
        if cfg.ray.dashboard and context is not None and context.dashboard_url:
            console.say(f"Ray dashboard: http://{context.dashboard_url} (this run's actors are in the namespace "
                        f"{namespace(cfg)})")


@dataclass
class Fleet:
    """Every actor of a run (training, evaluation or a benchmark), built by the functions below.
    `collector` is the work source: the SampleCollector in training, the EvalQueue in eval."""
    engine_set: EngineSet
    trainers: TrainerGroup
    collector: CollectorRole
    episodes: list
    episode_runs: EpisodeLoops
    namespace: str = ""
    rollout: Optional[RolloutConfig] = None  # what the episode actors run with (eval: its temperature)
    episode_prefix: str = "episode"
    seed: int = 0
    tokenizer_path: str = ""
    episode_replacements: int = 0

    @property
    def engines(self) -> list:
        return self.engine_set.handles

    def all_actors(self) -> list:
        # Sandbox actors belong to their episode actors and end with them.
        return [*self.episodes, self.collector.actor, *self.engines, *self.trainers.actors]


def _opts(namespace_: str, name: str, where: Optional[dict] = None) -> dict:
    # The CPU spine schedules by memory, not cores: actors sleep most of the time. `where`:
    # GPUs and role resource from the placement (actors/cluster/placement.py).
    return {"name": name, "namespace": namespace_, "num_cpus": 0, **(where or {})}


def _engines(cfg: Config, model_path: str, ns: str, mode: str) -> EngineSet:
    """Reserve the run's placement (its GPUs, before any actor starts) and start the engines on it."""
    placement = Placement.reserve(build_plan(cfg, mode), cfg.deadlines.placement_s)
    return EngineSet(cfg.engine, model_path, ns, placement, deadlines=cfg.deadlines).start()


def launch(cfg: Config, model_path: str, tasks: Union[list, TaskStream], with_trainers: bool = True) -> Fleet:
    """Engines, trainer shards (joined in one process group) and the collector; no episodes yet,
    so a resumed run can restore the collector before any work is handed out. Without trainers:
    the rollout side alone (`swerve bench scale`)."""
    ns = namespace(cfg)
    engine_set = _engines(cfg, model_path, ns, "train")
    world = cfg.trainer.num_shards if with_trainers else 0
    where = engine_set.placement
    trainers = TrainerGroup([remote_trainer().options(**_opts(ns, f"trainer-{r}", where.options("trainer", r))).remote(
        r, world, cfg.trainer, model_path, cfg.run.seed) for r in range(world)], cfg.deadlines)
    trainers.join()
    # The books live on the driver's node: losing that node is losing the driver, which the
    # checkpoint/resume path covers; any other node may go (its actors are replaced).
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    collector = RemoteCollector.options(**_opts(ns, "collector"), scheduling_strategy=here).remote(
        cfg.rollout, tasks, [t.id for t in tasks] if isinstance(tasks, list) else [], cfg.run.seed)
    return Fleet(engine_set, trainers, CollectorRole(collector, cfg.deadlines), [], EpisodeLoops(), namespace=ns,
                 rollout=cfg.rollout, seed=cfg.run.seed)


def launch_eval(cfg: Config, model_path: str, ns: str, queue, rollout: RolloutConfig) -> Fleet:
    """The evaluation's fleet: engines and the eval queue as the work source; no trainers."""
    engine_set = _engines(cfg, model_path, ns, "eval")
    return Fleet(engine_set, TrainerGroup([], cfg.deadlines), CollectorRole(queue, cfg.deadlines), [], EpisodeLoops(),
                 namespace=ns, rollout=rollout, episode_prefix="eval-episode", seed=cfg.eval.seed)


def _episode(fleet: Fleet, cfg: Config, i: int, generation: int):
    label = f"{i}-g{generation}" if generation else str(i)
    faults = FaultPlan.for_episode(cfg.faults, derive_seed(fleet.seed, generation, i))
    sandbox = env_sandbox(cfg.env, cfg.sandbox)
    return RemoteEpisode.options(**_opts(fleet.namespace, f"{fleet.episode_prefix}-{label}")).remote(
        i, fleet.rollout, cfg.env, sandbox, fleet.tokenizer_path,
        EngineRouter(fleet.engines, engine_call, lookup=NamedEngines(fleet.namespace),
                     generate_timeout_s=cfg.deadlines.generate_s, probe_timeout_s=cfg.deadlines.engine_health_s),
        WorkSource(fleet.collector.actor, cfg.deadlines.collector_call_s),
        SandboxLease(i, sandbox, fleet.namespace, resource=cfg.ray.sandbox_resource, label=label,
                     margin_s=cfg.deadlines.sandbox_margin_s, up_s=cfg.deadlines.sandbox_up_s),
        faults, GatewaySpec.from_config(cfg))


def start_episodes(fleet: Fleet, cfg: Config, tokenizer_path: str, count: Optional[int] = None) -> None:
    fleet.tokenizer_path = tokenizer_path
    count = cfg.rollout.num_episode_actors if count is None else count
    fleet.episodes = [_episode(fleet, cfg, i, 0) for i in range(count)]
    for i, episode in enumerate(fleet.episodes):
        fleet.episode_runs.start(i, episode)


def _abandon(fleet: Fleet, i: int, reason: str) -> int:
    """Episode actor i died: what it held ends as infra_error(env). Returns how many items."""
    return fleet.collector.abandon(f"episode-{i}", InfraSource.ENV.value, reason)


def replace_episode(fleet: Fleet, cfg: Config, i: int, reason: str) -> int:
    """Episode actor i died (its process or its node): its in-flight work is re-run as an infra error
    of the env, and a new actor takes its place. Returns how many items it held."""
    held = _abandon(fleet, i, reason)
    fleet.episode_replacements += 1
    fleet.episodes[i] = _episode(fleet, cfg, i, fleet.episode_replacements)
    fleet.episode_runs.start(i, fleet.episodes[i])
    print(f"[swerve] {fleet.episode_prefix}-{i} died ({reason.splitlines()[0][:120]}); replaced, {held} items re-run",
          flush=True)
    return held


def reap_episodes(fleet: Fleet, cfg: Config) -> int:
    """Replace every episode actor that died; returns how many episode loops ended normally
    (their run() returned: in training only after stop, in eval when the queue is empty). A loop
    that crashed (a RayTaskError, not a death) surfaces its error here."""
    returned, died = fleet.episode_runs.ended(timeout_s=0)
    for index, reason in died.items():
        replace_episode(fleet, cfg, index, reason)
    return len(returned)


def shutdown(fleet: Fleet, grace_s: float) -> list:
    """Stop admitting, let running episodes finish (bounded), then end every actor we started.
    An episode actor that died after the last batch (its process or node) is not replaced: what
    it held ends as infra_error(env), as during the run, so nothing admitted stays in flight."""
    fleet.collector.stop()
    results, died = fleet.episode_runs.ended(timeout_s=grace_s)
    for i, reason in died.items():
        held = _abandon(fleet, i, reason)
        print(f"[swerve] episode-{i} died at the end of the run ({reason.splitlines()[0][:120]}); "
              f"{held} items ended as infra errors", flush=True)
    fleet.trainers.close()
    return results


def kill(fleet: Fleet) -> None:
    for actor in fleet.all_actors():
        ray.kill(actor)
    if fleet.engine_set.placement:
        fleet.engine_set.placement.release()  # the GPUs go back; a rebuilt fleet reserves them anew
