"""Run by tests/actors/episodes/test_faults.py in its own process: a 2-node ray.cluster_utils.Cluster (the head
declares `compute` and runs the driver, engines and trainer; the other node declares `sandbox` and holds
every sandbox actor, and whatever else Ray puts there, e.g. episode actors). Once the run has trained a step, the sandbox node is removed (its processes
killed) and a fresh sandbox node joins, as an autoscaler would replace it. Prints one JSON line:
the run's accounting plus where the episode actors ran."""
import json
import sys
import threading
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster
from ray.util.state import list_actors

from bench.resilience.placement_run import SMOKE_CONFIG, node_args
from policies.engines.process import free_port


def remove_after_first_step(cluster: Cluster, node, metrics: Path, report: dict, trainer: threading.Thread) -> None:
    """In the main thread (Ray's node start installs signal handlers), while `trainer` runs the run."""
    while not (metrics.exists() and metrics.read_text().strip()):
        if not trainer.is_alive():
            return
        time.sleep(0.5)
    actors = [a for a in list_actors(filters=[("ray_namespace", "=", "swerve-node-loss"), ("state", "=", "ALIVE")],
                                     detail=True, limit=1000) if a.get("name")]
    report["sandboxes_on_removed_node"] = sum(a["name"].startswith("sandbox-") and a["node_id"] == node.node_id
                                              for a in actors)
    report["episode_nodes"] = sorted(a["node_id"] for a in actors if a["name"].startswith("episode-"))
    cluster.remove_node(node)
    report["removed_at_step"] = len(metrics.read_text().splitlines())
    cluster.add_node(**node_args({"sandbox": 100}))
    report["nodes_removed"] = 1


def main(run_dir: str, cache: str, total_steps: int) -> None:
    from actors.stages.driver import train
    from configs import load_config

    cluster = Cluster(initialize_head=True, head_node_args=node_args(
        {"compute": 100}, include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=free_port()))
    sandbox_node = cluster.add_node(**node_args({"sandbox": 100}))
    ray.init(address=cluster.address, namespace="node-loss-driver")
    cfg = load_config(SMOKE_CONFIG, [
        f"run.dir={run_dir}", "run.name=node-loss", f"trainer.total_steps={total_steps}", "engine.num_engines=1",
        f"model.cache_dir={cache}", f"tokenizer.cache_dir={cache}", "rollout.max_turns=2",
        "rollout.max_tokens_per_turn=16", "rollout.max_infra_retries=8",
        "ray.sandbox_resource=sandbox", "ray.engine_resource=compute", "ray.trainer_resource=compute",
    ])
    report = {"head_node": cluster.head_node.node_id, "nodes_removed": 0}
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["path"] = train(cfg)
        except BaseException as err:  # noqa: BLE001 - handed to the main thread, which re-raises it
            outcome["error"] = err

    trainer = threading.Thread(target=run)
    trainer.start()
    remove_after_first_step(cluster, sandbox_node, Path(run_dir) / "node-loss" / "metrics.jsonl", report, trainer)
    trainer.join()
    if "error" in outcome:
        raise outcome["error"]
    report["accounting"] = json.loads((outcome["path"] / "accounting.json").read_text())
    print(json.dumps(report))
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
