"""Start Ray and build every actor of a run from its config (named by role and index)."""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from actors.engine_router import EngineRouter
from actors.remote import (NamedEngines, Proxy, RemoteCollector, RemoteEpisode, RemoteTrainer, SandboxLease,
                           create_engine, engine_call)
from configs import Config
from configs.schema import EngineConfig

log = logging.getLogger("swerve")


def namespace(cfg: Config) -> str:
    return cfg.ray.namespace or f"swerve-{cfg.run.name}"


def init_ray(cfg: Config) -> None:
    """Join the cluster named by ray.address / RAY_ADDRESS (as `ray job submit` sets), else start one."""
    if ray.is_initialized():
        return
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS", "")
    if address:
        ray.init(address=address, namespace=namespace(cfg))
    else:
        ray.init(num_cpus=cfg.ray.num_cpus or None, namespace=namespace(cfg),
                 include_dashboard=False, _node_ip_address="127.0.0.1")


@dataclass
class EngineSet:
    """The run's engines, named `engine-<i>`; a dead one is replaced under its name and gets the
    current weights before it serves (routers find it by name, see EngineRouter)."""

    cfg: EngineConfig
    model_path: str
    namespace: str
    handles: list = field(default_factory=list)
    version: int = 0
    weights: object = None  # ObjectRef of the current state_dict; None: the checkpoint at model_path
    restarts: int = 0
    _next_check: float = 0.0

    def start(self) -> "EngineSet":
        self.handles = [create_engine(self.cfg, i, self.model_path, self.namespace)
                        for i in range(self.cfg.num_engines)]
        return self

    def _replace(self, index: int) -> None:
        ray.kill(self.handles[index])  # already dead; frees its name sooner
        deadline = time.monotonic() + 30.0
        while True:  # the dead actor's name is released asynchronously
            try:
                handle = create_engine(self.cfg, index, self.model_path, self.namespace,
                                       wait_for_weights=self.weights is not None)
                break
            except ValueError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        if self.weights is not None:
            ray.get(handle.update_weights.remote(self.weights, self.version))
        self.handles[index] = handle
        self.restarts += 1
        print(f"[swerve] engine-{index} died; replaced, serving v{self.version}", flush=True)

    def replace_dead(self, timeout_s: float = 10.0) -> list[int]:
        """Probe every engine; replace the dead ones (with the current weights). Returns their indices."""
        probes = [h.ping.remote() for h in self.handles]
        dead = []
        for i, ref in enumerate(probes):
            try:
                if not ray.get(ref, timeout=timeout_s):
                    dead.append(i)
            except RayActorError:
                dead.append(i)
            except GetTimeoutError:
                log.warning("engine-%d did not answer a ping within %.0fs", i, timeout_s)
        for i in dead:
            self._replace(i)
        self._next_check = time.monotonic() + self.cfg.health_interval_s
        return dead

    def maybe_replace_dead(self) -> list[int]:
        return self.replace_dead() if time.monotonic() >= self._next_check else []

    def sync(self, state_dict_ref, version: int) -> list[int]:
        """Every engine serves `version` when this returns (a dead one is replaced with it)."""
        self.weights, self.version = state_dict_ref, version
        refs = [h.update_weights.remote(state_dict_ref, version) for h in self.handles]
        versions = []
        for i, ref in enumerate(refs):
            try:
                versions.append(ray.get(ref))
            except RayActorError:
                self._replace(i)
                versions.append(ray.get(self.handles[i].version.remote()))
        return versions

    def stats(self, reset_peak: bool = False) -> list[dict]:
        out = []
        for i, h in enumerate(self.handles):
            try:
                out.append(ray.get(h.stats.remote(reset_peak)))
            except RayActorError:
                out.append({"index": i, "dead": True, "kv_usage_peak": 0.0, "tokens_per_s": 0.0,
                            "weight_update_s": 0.0})
        return out


@dataclass
class Fleet:
    engine_set: EngineSet
    trainers: list
    collector: object
    episodes: list
    episode_runs: list

    @property
    def engines(self) -> list:
        return self.engine_set.handles

    def all_actors(self) -> list:
        # Sandbox actors belong to their episode actors and end with them.
        return [*self.episodes, self.collector, *self.engines, *self.trainers]


def launch(cfg: Config, tokenizer_path: str, model_path: str, tasks: list) -> Fleet:
    ns = namespace(cfg)

    def opts(name: str) -> dict:
        # The CPU spine schedules by memory, not cores: actors sleep most of the time.
        return {"name": name, "namespace": ns, "num_cpus": 0}

    engine_set = EngineSet(cfg.engine, model_path, ns).start()
    engines = engine_set.handles
    world = cfg.trainer.num_shards
    trainers = [RemoteTrainer.options(**opts(f"trainer-{r}")).remote(r, world, cfg.trainer, model_path, cfg.run.seed)
                for r in range(world)]
    addr, port = ray.get(trainers[0].rendezvous_address.remote())
    ray.get([t.join.remote(addr, port) for t in trainers])
    collector = RemoteCollector.options(**opts("collector")).remote(
        cfg.rollout, tasks, [t.id for t in tasks], cfg.run.seed)
    n = cfg.rollout.num_episode_actors
    seed = cfg.run.seed
    episodes = [
        RemoteEpisode.options(**opts(f"episode-{i}")).remote(
            i, cfg.rollout, cfg.env, tokenizer_path,
            EngineRouter(engines, engine_call, cfg.faults.llm_error_rate, seed=seed * 7919 + i,
                         lookup=NamedEngines(ns)),
            Proxy(collector), SandboxLease(i, cfg.sandbox, cfg.faults, ns, seed=seed * 104729 + i))
        for i in range(n)
    ]
    runs = [e.run.remote() for e in episodes]
    return Fleet(engine_set, trainers, collector, episodes, runs)


def shutdown(fleet: Fleet, grace_s: float) -> list:
    """Stop admitting, let running episodes finish (bounded), then end every actor we started."""
    ray.get(fleet.collector.stop.remote())
    done, _ = ray.wait(fleet.episode_runs, num_returns=len(fleet.episode_runs), timeout=grace_s)
    results = ray.get(done)
    ray.get([t.close.remote() for t in fleet.trainers])
    return results


def kill(fleet: Fleet) -> None:
    for actor in fleet.all_actors():
        ray.kill(actor)
