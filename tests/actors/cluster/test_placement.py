"""Placement on a 4-node Ray cluster (bench/resilience/placement_run.py, one cluster for both runs): roles by
custom resources (sandboxes on the node that declares `sandbox`, engines and trainers elsewhere), and
GPU placement from the plan, on CPU with declared GPUs: every GPU role gets its own GPUs (Ray's
CUDA_VISIBLE_DEVICES), trainer ranks of one node are consecutive, each engine's SGLang server is
started on its GPUs, and a plan the cluster cannot hold fails at start, naming the shortfall."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.cluster.placement import PlacementShortfall, check_fits
from actors.cluster.placement_plan import build_plan
from configs import load_config

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "bench" / "resilience" / "placement_run.py"
FAKES = REPO / "tests" / "fakes"


@pytest.fixture(scope="module")
def report(tmp_path_factory, swerve_cache):
    """One cluster, one training step placed by resources, then the GPU shape launched on it."""
    run_dir = tmp_path_factory.mktemp("placement")
    record = run_dir / "sglang-launches"
    record.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FAKES), str(REPO)]),
           "SWERVE_FAKE_SGLANG_RECORD": str(record)}
    run = subprocess.run([sys.executable, str(SCRIPT), str(run_dir), swerve_cache], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return {**json.loads(run.stdout.strip().splitlines()[-1]),
            "launches": [json.loads(p.read_text()) for p in record.glob("*.json")]}


def _gpus(seen: dict) -> set:
    return {(seen["node"], g) for g in seen["cuda"].split(",")}


@pytest.mark.slow  # a 4-node Ray cluster
def test_roles_are_placed_by_custom_resources(report):
    nodes = {a["name"]: a["node_id"] for a in report["actors"]}
    sandboxes = [n for n in nodes if n.startswith("sandbox-")]
    assert sandboxes, nodes
    assert all(nodes[n] == report["sandbox_node"] for n in sandboxes)
    for name in ("engine-0", "trainer-0"):
        assert nodes[name] != report["sandbox_node"]


@pytest.mark.slow  # the same cluster: 2 engines and 4 trainer shards on its two GPU nodes
def test_the_scaled_down_reference_shape_gets_distinct_gpus_packed_ranks_and_a_shortfall_error(report):
    engines, trainers = report["engines"], report["trainers"]
    assert len(engines) == 2 and len(trainers) == 4
    taken = [gpu for role in engines + trainers for gpu in _gpus(role)]
    assert len(taken) == 8 == len(set(taken))  # 2 x tp 2 + 4 x 1: no GPU given twice
    assert {node for node, _ in taken} == set(report["gpu_nodes"])
    for engine in engines:
        assert len(_gpus(engine)) == 2 and engine["cuda"] == ",".join(engine["gpu_ids"])
        assert engine["cmd"][1:3] == ["-m", "sglang.launch_server"] and "--tp-size" in engine["cmd"]
    for trainer in trainers:
        assert len(_gpus(trainer)) == 1
    nodes_in_rank_order = [t["node"] for t in trainers]
    runs = [n for i, n in enumerate(nodes_in_rank_order) if i == 0 or n != nodes_in_rank_order[i - 1]]
    assert len(runs) == len(set(runs)), nodes_in_rank_order  # each node's ranks are consecutive
    # Each engine's server was started with exactly that engine's GPUs in view.
    launches = report["launches"]
    assert sorted(launch["cuda_visible_devices"] for launch in launches) == sorted(e["cuda"] for e in engines)
    assert all(launch["tp_size"] == 2 and not launch["unknown_args"] for launch in launches)
    assert report["shortfall"] and "12 GPUs" in report["shortfall"] and "engine.num_engines" in report["shortfall"]
    assert report["shortfall_after_s"] < 60  # refused at start, not a wait for resources


def test_a_plan_that_does_not_fit_names_the_missing_gpus():
    cfg = load_config("configs/qwen3_30b_a3b_swe.yaml")
    plan = build_plan(cfg)
    engine_node = ("n-engine", {"GPU": 8.0, "engine": 1000.0})
    trainer_node = ("n-trainer", {"GPU": 8.0, "trainer": 1000.0})
    check_fits(plan, [engine_node, trainer_node])  # the reference: one 8-GPU node per kind
    with pytest.raises(PlacementShortfall) as err:
        check_fits(plan, [engine_node, ("n-trainer", {"GPU": 4.0, "trainer": 1000.0})])
    message = str(err.value)
    assert "trainer-pg bundle 4" in message and "16 GPUs" in message and "trainer.num_shards" in message
    with pytest.raises(PlacementShortfall, match="engine-pg bundle 0"):  # GPUs, but not on an engine node
        check_fits(plan, [("n-other", {"GPU": 16.0})])
