"""Start Ray and build every actor of a run from its config (named by role and index)."""
from __future__ import annotations

import os
from dataclasses import dataclass

import ray

from actors.engine_router import EngineRouter
from actors.remote import Proxy, RemoteCollector, RemoteEngine, RemoteEpisode, RemoteTrainer, SandboxLease, engine_call
from configs import Config


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
class Fleet:
    engines: list
    trainers: list
    collector: object
    episodes: list
    episode_runs: list

    def all_actors(self) -> list:
        # Sandbox actors belong to their episode actors and end with them.
        return [*self.episodes, self.collector, *self.engines, *self.trainers]


def launch(cfg: Config, tokenizer_path: str, model_path: str, tasks: list) -> Fleet:
    ns = namespace(cfg)

    def opts(name: str) -> dict:
        # The CPU spine schedules by memory, not cores: actors sleep most of the time.
        return {"name": name, "namespace": ns, "num_cpus": 0}

    engines = [RemoteEngine.options(**opts(f"engine-{i}")).remote(i, cfg.engine, model_path)
               for i in range(cfg.engine.num_engines)]
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
            EngineRouter(engines, engine_call, cfg.faults.llm_error_rate, seed=seed * 7919 + i),
            Proxy(collector), SandboxLease(i, cfg.sandbox, cfg.faults, ns, seed=seed * 104729 + i))
        for i in range(n)
    ]
    runs = [e.run.remote() for e in episodes]
    return Fleet(engines, trainers, collector, episodes, runs)


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
