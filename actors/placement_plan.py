"""What a run would create, from its config alone: every actor (role, name, count, resources)
and the placement groups for engines and trainer shards. Starts nothing (no Ray needed).

A run is a GPU run when engine.backend is "sglang": each engine then needs engine.tp_size GPUs
and each trainer shard one GPU. `resources` mirrors the options actors/launch.py and
actors/remote.py pass (num_cpus 0: the CPU spine schedules by memory; a sliver of the role's
custom resource from ray.*_resource); `num_gpus` is what the role needs on the node.
"""
from __future__ import annotations

from configs import Config

# A sliver of the role's custom resource per actor (actors.remote.placement).
RESOURCE_SLIVER = 0.001


def _custom(resource: str) -> dict:
    return {resource: RESOURCE_SLIVER} if resource else {}


def _actor(role: str, names: list[str], num_gpus: float, resource: str, **extra) -> dict:
    return {"role": role, "names": names, "count": len(names),
            "resources": {"num_cpus": 0, "num_gpus": num_gpus, "custom": _custom(resource)}, **extra}


def build_plan(cfg: Config, mode: str = "train") -> dict:
    """The actors and placement groups `swerve train` (mode "train") or `swerve eval` (mode
    "eval") would create for cfg."""
    if mode not in ("train", "eval"):
        raise ValueError(f"mode is {mode!r}; allowed: train, eval")
    gpu_run = cfg.engine.backend == "sglang"
    engine_gpus = cfg.engine.tp_size if gpu_run else 0
    trainer_gpus = 1 if gpu_run else 0
    n_eng, n_ep = cfg.engine.num_engines, cfg.rollout.num_episode_actors
    prefix = "eval-" if mode == "eval" else ""
    actors = [_actor("engine", [f"engine-{i}" for i in range(n_eng)], engine_gpus, cfg.ray.engine_resource,
                     backend=cfg.engine.backend, tp_size=cfg.engine.tp_size,
                     max_context_tokens=cfg.engine.max_context_tokens)]
    groups = [{"name": f"engine-{i}-pg", "strategy": "STRICT_PACK",
               "bundles": [{"GPU": engine_gpus, **_custom(cfg.ray.engine_resource)}]}
              for i in range(n_eng)] if engine_gpus else []
    if mode == "train":
        world = cfg.trainer.num_shards
        actors.append(_actor("trainer", [f"trainer-{r}" for r in range(world)], trainer_gpus,
                             cfg.ray.trainer_resource, backend=cfg.trainer.backend,
                             tensor_parallel_size=cfg.trainer.tensor_parallel_size,
                             expert_parallel_size=cfg.trainer.expert_parallel_size))
        if trainer_gpus:
            groups.append({"name": "trainer-pg", "strategy": "PACK",
                           "bundles": [{"GPU": trainer_gpus, **_custom(cfg.ray.trainer_resource)}
                                       for _ in range(world)]})
        actors.append(_actor("collector", ["collector"], 0, ""))
    else:
        actors.append(_actor("eval_queue", ["eval-queue"], 0, ""))
    actors.append(_actor("episode", [f"{prefix}episode-{i}" for i in range(n_ep)], 0, ""))
    # One sandbox lease actor per episode actor, created on first use and owned by it.
    actors.append(_actor("sandbox", [f"sandbox-{i}" for i in range(n_ep)], 0, cfg.ray.sandbox_resource,
                         backend=cfg.sandbox.backend, vcpus=cfg.sandbox.vcpus, memory_mb=cfg.sandbox.memory_mb))
    custom_totals: dict[str, float] = {}
    for a in actors:
        for name, amount in a["resources"]["custom"].items():
            custom_totals[name] = round(custom_totals.get(name, 0.0) + amount * a["count"], 6)
    return {
        "mode": mode,
        "run": cfg.run.name,
        "gpu_run": gpu_run,
        "actors": actors,
        "placement_groups": groups,
        "totals": {
            "actors": sum(a["count"] for a in actors),
            "num_gpus": sum(a["resources"]["num_gpus"] * a["count"] for a in actors),
            "num_cpus": 0,
            "custom": custom_totals,
            "sandbox_vcpus": cfg.sandbox.vcpus * n_ep,
            "sandbox_memory_mb": cfg.sandbox.memory_mb * n_ep,
        },
        "notes": ["actors/launch.py places engines and trainer shards by custom resource only; "
                  "the GPU counts and placement groups here are what they need on a GPU cluster"],
    }


def role(plan: dict, name: str) -> dict:
    """The plan's entry for one role."""
    return next(a for a in plan["actors"] if a["role"] == name)
