"""GPU placement from the plan, on CPU with declared GPUs: every GPU role gets its own GPUs (Ray's
CUDA_VISIBLE_DEVICES), trainer ranks of one node are consecutive, each engine's SGLang server is
started on its GPUs, and a plan the cluster cannot hold fails at start, naming the shortfall."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.placement import PlacementShortfall, check_fits
from actors.placement_plan import build_plan
from configs import load_config

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_placement_run.py"
FAKES = REPO / "tests" / "fakes"


def _gpus(seen: dict) -> set:
    return {(seen["node"], g) for g in seen["cuda"].split(",")}


@pytest.mark.slow  # a 3-node Ray cluster, 2 engines and 4 trainer shards
def test_the_scaled_down_reference_shape_gets_distinct_gpus_packed_ranks_and_a_shortfall_error(tmp_path, swerve_cache):
    record = tmp_path / "sglang-launches"
    record.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FAKES), str(REPO)]),
           "SWERVE_FAKE_SGLANG_RECORD": str(record)}
    run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), swerve_cache], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
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
    launches = [json.loads(p.read_text()) for p in record.glob("*.json")]
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
