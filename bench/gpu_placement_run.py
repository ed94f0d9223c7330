"""Run by tests/actors/test_gpu_placement.py in its own process: the reference recipe's shape
scaled down (2 sglang engines x tp 2, 4 trainer ranks) launched by the real `launch` on a
ray.cluster_utils.Cluster of two nodes declaring 4 GPUs each (and the role resource `gpu`).
Prints, as JSON, what every GPU role got: its node, CUDA_VISIBLE_DEVICES, and for engines the
SGLang command line it started (recorded by the fake launcher on PYTHONPATH: there is no GPU
here). Then a plan larger than the cluster must fail at start with the shortfall."""
import json
import os
import sys
import time

import ray
from ray.cluster_utils import Cluster

from bench.placement_run import SMOKE_CONFIG, node_args

SHAPE = ["engine.backend=sglang", "engine.num_engines=2", "engine.tp_size=2", "trainer.num_shards=4",
         "ray.engine_resource=gpu", "ray.trainer_resource=gpu", "engine.startup_timeout_s=120"]


def _seen(handle) -> dict:
    """Inside the actor: its node and GPU view (and an engine's server command line)."""
    def probe(self):
        server = getattr(self, "server", None)
        return {"node": ray.get_runtime_context().get_node_id(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "gpu_ids": [str(g) for g in ray.get_gpu_ids()], "cmd": server.cmd if server else None}
    return ray.get(handle.__ray_call__.remote(probe))


def main(run_dir: str, cache: str) -> None:
    from actors.launch import kill, launch
    from actors.placement import PlacementShortfall
    from actors.policy_setup import ensure_policy
    from configs import load_config
    from envs.validate import trainable_tasks

    cluster = Cluster(initialize_head=True, head_node_args=node_args({}))
    gpu_nodes = [cluster.add_node(**node_args({"gpu": 100}, num_gpus=4)) for _ in range(2)]
    ray.init(address=cluster.address, namespace="gpu-placement-driver")
    base = [f"run.dir={run_dir}", "run.name=gpu-placement", f"model.cache_dir={cache}", f"tokenizer.cache_dir={cache}"]
    cfg = load_config(SMOKE_CONFIG, [*base, *SHAPE])
    _, model_path = ensure_policy(cfg)
    tasks, _ = trainable_tasks(cfg.tasks)
    fleet = launch(cfg, model_path, tasks)
    try:
        engines = [_seen(e) for e in fleet.engines]
        trainers = [_seen(t) for t in fleet.trainers.actors]
    finally:
        kill(fleet)
    too_big = load_config(SMOKE_CONFIG, [*base, *SHAPE, "engine.num_engines=4"])  # 12 GPUs > 8
    started = time.monotonic()
    try:
        launch(too_big, model_path, tasks)
        shortfall = None
    except PlacementShortfall as err:
        shortfall = str(err)
    print(json.dumps({"gpu_nodes": [n.node_id for n in gpu_nodes], "engines": engines, "trainers": trainers,
                      "shortfall": shortfall, "shortfall_after_s": round(time.monotonic() - started, 2)}))
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
