"""Run by tests/actors/cluster/test_placement.py in its own process, on one ray.cluster_utils.Cluster of four
nodes: a head declaring `compute`, a node declaring `sandbox`, and two declaring 4 GPUs each (and
the role resource `gpu`).

1. Placement by custom resources: one training step with sandboxes on `sandbox` and engines and
   trainers on `compute`; where every actor ran is read back from Ray's state API.
2. GPU placement: the reference recipe's shape scaled down (2 sglang engines x tp 2, 4 trainer
   ranks) launched by the real `launch` on the GPU nodes; what every GPU role got (its node,
   CUDA_VISIBLE_DEVICES, and for engines the SGLang command line, recorded by the fake launcher on
   PYTHONPATH: there is no GPU here). Then a plan larger than the cluster must fail at start.

Prints both reports as one JSON line."""
import json
import os
import sys
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster
from ray.util.state import list_actors

from policies.engines.process import free_port

# The tests' fast settings, found from this file wherever the checkout is (not from the cwd).
SMOKE_CONFIG = str(Path(__file__).resolve().parents[2] / "tests" / "smoke.yaml")
GPU_SHAPE = ["engine.backend=sglang", "engine.num_engines=2", "engine.tp_size=2", "trainer.num_shards=4",
             "ray.engine_resource=gpu", "ray.trainer_resource=gpu", "engine.startup_timeout_s=120"]


def node_args(resources: dict, **extra) -> dict:
    # Explicit ports: another Ray (the test session's) may hold the defaults on this machine.
    return {"num_cpus": 1, "resources": resources,
            "dashboard_agent_listen_port": free_port(), "metrics_export_port": free_port(),
            "runtime_env_agent_port": free_port(), **extra}


def by_resources(run_dir: str, cache: str) -> list[dict]:
    from actors.stages.driver import train
    from configs import load_config

    cfg = load_config(SMOKE_CONFIG, [
        f"run.dir={run_dir}", "run.name=placement", "trainer.total_steps=1", "engine.num_engines=1",
        f"model.cache_dir={cache}", f"tokenizer.cache_dir={cache}", "rollout.max_turns=2",
        "ray.sandbox_resource=sandbox", "ray.engine_resource=compute", "ray.trainer_resource=compute",
    ])
    train(cfg)
    actors = list_actors(filters=[("ray_namespace", "=", "swerve-placement")], detail=True, limit=1000)
    return [{"name": a["name"], "node_id": a["node_id"]} for a in actors if a.get("name")]


def _seen(handle) -> dict:
    """Inside the actor: its node and GPU view (and an engine's server command line)."""
    def probe(self):
        server = getattr(self, "server", None)
        return {"node": ray.get_runtime_context().get_node_id(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "gpu_ids": [str(g) for g in ray.get_gpu_ids()], "cmd": server.cmd if server else None}
    return ray.get(handle.__ray_call__.remote(probe))


def on_gpus(run_dir: str, cache: str) -> dict:
    from actors.fleet.launch import kill, launch
    from actors.cluster.placement import PlacementShortfall
    from actors.stages.policy_setup import ensure_policy
    from configs import load_config
    from envs.validate import trainable_tasks

    base = [f"run.dir={run_dir}", "run.name=gpu-placement", f"model.cache_dir={cache}", f"tokenizer.cache_dir={cache}"]
    cfg = load_config(SMOKE_CONFIG, [*base, *GPU_SHAPE])
    _, model_path = ensure_policy(cfg)
    tasks, _ = trainable_tasks(cfg.tasks)
    fleet = launch(cfg, model_path, tasks)
    try:
        engines = [_seen(e) for e in fleet.engines]
        trainers = [_seen(t) for t in fleet.trainers.actors]
    finally:
        kill(fleet)
    too_big = load_config(SMOKE_CONFIG, [*base, *GPU_SHAPE, "engine.num_engines=4"])  # 12 GPUs > 8
    started = time.monotonic()
    try:
        launch(too_big, model_path, tasks)
        shortfall = None
    except PlacementShortfall as err:
        shortfall = str(err)
    return {"engines": engines, "trainers": trainers, "shortfall": shortfall,
            "shortfall_after_s": round(time.monotonic() - started, 2)}


def main(run_dir: str, cache: str) -> None:
    cluster = Cluster(initialize_head=True, head_node_args=node_args(
        {"compute": 100}, include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=free_port()))
    sandbox_node = cluster.add_node(**node_args({"sandbox": 100}))
    gpu_nodes = [cluster.add_node(**node_args({"gpu": 100}, num_gpus=4)) for _ in range(2)]
    ray.init(address=cluster.address, namespace="placement-driver")
    try:
        report = {"sandbox_node": sandbox_node.node_id, "actors": by_resources(run_dir, cache),
                  "gpu_nodes": [n.node_id for n in gpu_nodes], **on_gpus(run_dir, cache)}
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
