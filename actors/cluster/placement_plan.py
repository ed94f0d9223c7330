"""What a run creates, from its config alone: every actor (role, name, count, resources), the
placement groups for engines and trainer shards, where each GPU role lands, and the timeouts
and caps in force. Starts nothing (no Ray needed); actors/cluster/placement.py makes it real in Ray
and actors/fleet/launch.py builds the fleet from it, so the plan is what runs.

A run is a GPU run when engine.backend is "sglang": each engine then needs engine.tp_size GPUs
(one bundle of a SPREAD group: its GPUs on one node, the engines spread over nodes) and each
trainer shard one GPU (one PACK group for all shards: ranks in order fill a node before the next). `resources` mirrors the
options the actors get (num_cpus 0: the CPU spine schedules by memory; a sliver of the role's
custom resource from ray.*_resource). `roles` says, per actor, the node and GPUs it would get on
nodes of ray.gpus_per_node GPUs each; at launch Ray's placement decides the node.
"""
from __future__ import annotations

import dataclasses

from configs import Config

# A sliver of the role's custom resource per actor (actors.fleet.remote.placement).
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
    # One bundle per engine (a bundle never spans nodes: an engine's tp GPUs share one), spread
    # over the engine nodes so one node's loss takes few engines and their load is shared.
    groups = [{"name": "engine-pg", "strategy": "SPREAD",
               "bundles": [{"GPU": engine_gpus, **_custom(cfg.ray.engine_resource)} for _ in range(n_eng)]}
              ] if engine_gpus else []
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
    roles = _assign(cfg, actors)
    for a in actors:
        for name, amount in a["resources"]["custom"].items():
            custom_totals[name] = round(custom_totals.get(name, 0.0) + amount * a["count"], 6)
    return {
        "mode": mode,
        "run": cfg.run.name,
        "gpu_run": gpu_run,
        "actors": actors,
        "roles": roles,
        "placement_groups": groups,
        "totals": {
            "actors": sum(a["count"] for a in actors),
            "num_gpus": sum(a["resources"]["num_gpus"] * a["count"] for a in actors),
            "num_cpus": 0,
            "custom": custom_totals,
            "sandbox_vcpus": cfg.sandbox.vcpus * n_ep,
            "sandbox_memory_mb": cfg.sandbox.memory_mb * n_ep,
        },
        "limits": _limits(cfg, mode),
    }


def _pool(resource: str, gpu: bool) -> str:
    """Name of the kind of node a role runs on: its custom resource's, else any GPU node."""
    return f"{resource}-node" if resource else ("gpu-node" if gpu else "any-node")


def _assign(cfg: Config, actors: list[dict]) -> list[dict]:
    """One row per actor: the node (kind and index) and the GPU indices on it. GPU roles fill
    nodes of ray.gpus_per_node GPUs, engines first and spread round-robin over as many nodes as
    they need, trainer ranks in order; roles whose resource names the same kind of node share
    those nodes."""
    per_node = cfg.ray.gpus_per_node
    free: dict[str, list[int]] = {}  # pool -> GPUs left on each of its nodes so far
    rows = []
    for actor in actors:
        need = int(actor["resources"]["num_gpus"])
        pool = _pool(next(iter(actor["resources"]["custom"]), ""), bool(need))
        if actor["role"] == "collector":
            pool = "driver-node"  # pinned to the driver's node (actors/fleet/launch.py)
        spread_over = -(-need * actor["count"] // per_node) if actor["role"] == "engine" and need else 1
        for i, name in enumerate(actor["names"]):
            if not need:
                rows.append({"role": actor["role"], "name": name, "node": pool, "gpus": []})
                continue
            if need > per_node:
                raise ValueError(f"{name} needs {need} GPUs on one node, but ray.gpus_per_node is {per_node}: "
                                 "lower engine.tp_size or raise ray.gpus_per_node")
            nodes = free.setdefault(pool, [])
            while len(nodes) < spread_over:
                nodes.append(per_node)
            wanted = i % spread_over
            index = wanted if nodes[wanted] >= need else next((k for k, left in enumerate(nodes) if left >= need), None)
            if index is None:
                nodes.append(per_node)
                index = len(nodes) - 1
            first = per_node - nodes[index]
            nodes[index] -= need
            rows.append({"role": actor["role"], "name": name, "node": f"{pool}-{index}",
                         "gpus": list(range(first, first + need))})
    return rows


def _limits(cfg: Config, mode: str) -> dict:
    """The per-role timeouts and caps a run holds its roles to (so an operator sees them first)."""
    rollout = cfg.eval if mode == "eval" else cfg.rollout
    return {
        "deadlines": dataclasses.asdict(cfg.deadlines),
        "sandbox": {"command_timeout_s": cfg.sandbox.command_timeout_s, "grade_timeout_s": cfg.env.swe.grade_timeout_s,
                    "listing_timeout_s": cfg.env.swe.listing_timeout_s,
                    "memory_mb": cfg.sandbox.memory_mb, "vcpus": cfg.sandbox.vcpus},
        "engine": {"max_context_tokens": cfg.engine.max_context_tokens, "max_batch_size": cfg.engine.max_batch_size,
                   "request_timeout_s": cfg.engine.request_timeout_s},
        "rollout": {k: getattr(cfg.rollout, k) for k in ("max_turns", "max_tokens_per_turn", "max_total_tokens",
                                                         "max_episode_seconds", "max_staleness")},
        "restarts": {"max_restarts": cfg.run.max_restarts, "max_restarts_total": cfg.run.max_restarts_total},
        "temperature": rollout.temperature,
    }


def role(plan: dict, name: str) -> dict:
    """The plan's entry for one role."""
    return next(a for a in plan["actors"] if a["role"] == name)


def format_plan(plan: dict) -> str:
    """The plan as an operator reads it before launch: each GPU role's node and GPUs, the CPU
    roles by kind, the totals and the limits in force."""
    lines = [f"placement of run {plan['run']} ({plan['mode']}, {'GPU' if plan['gpu_run'] else 'CPU'} run)", ""]
    gpu_rows = [r for r in plan["roles"] if r["gpus"]]
    for row in gpu_rows:
        lines.append(f"  {row['name']:<14} {row['node']:<18} GPUs {','.join(map(str, row['gpus']))}")
    counts: dict[tuple[str, str], int] = {}
    for row in plan["roles"]:
        if not row["gpus"]:
            counts[(row["role"], row["node"])] = counts.get((row["role"], row["node"]), 0) + 1
    for (kind, node), n in counts.items():
        lines.append(f"  {n:>4} x {kind:<9} {node:<18} no GPU")
    totals = plan["totals"]
    lines += ["", f"totals: {totals['actors']} actors, {totals['num_gpus']:g} GPUs, custom resources {totals['custom']}, "
                  f"sandboxes {totals['sandbox_vcpus']} vCPU / {totals['sandbox_memory_mb']} MB",
              f"placement groups: {', '.join(g['name'] + ' ' + g['strategy'] for g in plan['placement_groups']) or 'none'}",
              "", "limits in force:"]
    for section, values in plan["limits"].items():
        shown = values if not isinstance(values, dict) else ", ".join(f"{k}={v}" for k, v in values.items())
        lines.append(f"  {section}: {shown}")
    return "\n".join(lines)
