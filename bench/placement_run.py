"""Run by tests/actors/test_placement.py in its own process: a 2-node ray.cluster_utils.Cluster
(one node declares the `sandbox` resource, the other `compute`), one training step, then print
where every actor of the run was placed as JSON (read back from Ray's state API)."""
import json
import sys
from pathlib import Path

import ray
from ray.cluster_utils import Cluster
from ray.util.state import list_actors
from policies.server.process import free_port

# The tests' fast settings, found from this file wherever the checkout is (not from the cwd).
SMOKE_CONFIG = str(Path(__file__).resolve().parents[1] / "tests" / "smoke.yaml")


def node_args(resources: dict, **extra) -> dict:
    # Explicit ports: another Ray (the test session's) may hold the defaults on this machine.
    return {"num_cpus": 1, "resources": resources,
            "dashboard_agent_listen_port": free_port(), "metrics_export_port": free_port(),
            "runtime_env_agent_port": free_port(), **extra}


def main(run_dir: str, cache: str) -> None:
    from actors.driver import train
    from configs import load_config

    cluster = Cluster(initialize_head=True, head_node_args=node_args(
        {"compute": 100}, include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=free_port()))
    sandbox_node = cluster.add_node(**node_args({"sandbox": 100}))
    ray.init(address=cluster.address, namespace="placement-driver")
    cfg = load_config(SMOKE_CONFIG, [
        f"run.dir={run_dir}", "run.name=placement", "trainer.total_steps=1", "engine.num_engines=1",
        f"model.cache_dir={cache}", f"tokenizer.cache_dir={cache}", "rollout.max_turns=2",
        "ray.sandbox_resource=sandbox", "ray.engine_resource=compute", "ray.trainer_resource=compute",
    ])
    train(cfg)
    actors = list_actors(filters=[("ray_namespace", "=", "swerve-placement")], detail=True, limit=1000)
    placed = [{"name": a["name"], "node_id": a["node_id"]} for a in actors if a.get("name")]
    print(json.dumps({"sandbox_node": sandbox_node.node_id, "actors": placed}))
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
