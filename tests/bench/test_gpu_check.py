"""`make gpu-check`: its dry run here (every part at the tiny size on CPU, with only the GPU machine's
packages), and the runner's isolation of a part that fails, crashes its worker or hangs."""
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import gpu_check
from bench.gpu_plan import PARTS, ROOT, RUN_BUDGET_S, WORKER_PARTS
from bench.gpu_parts import LOGPROB_TOLERANCE


@pytest.mark.slow
def test_the_dry_run_runs_every_part_on_cpu_and_the_plan_fits(tmp_path):
    # An empty wheelhouse: offline, the wheels are bounded by the installed files and not installed.
    done = subprocess.run([sys.executable, "-m", "bench.gpu_check", "--dry-run", "--out", str(tmp_path),
                           "--wheelhouse", str(tmp_path / "no-wheels")], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    parts = report["parts"]
    assert list(parts) == [name for name, _ in PARTS]
    assert parts["install"]["status"] == "skipped" and "no wheelhouse" in parts["install"]["reason"]
    assert all(parts[name]["status"] == "ok" for name in WORKER_PARTS), parts
    for backend in ("torch", "megatron"):
        trainer = parts[f"{backend}_trainer"]
        assert trainer["backend"] == backend and len(trainer["loss"]) == len(trainer["step_s"]) == 3
        assert trainer["loss"][-1] != trainer["loss"][0] and all(s > 0 for s in trainer["step_s"])
        assert trainer["behavior_mismatch_mean"] < LOGPROB_TOLERANCE
    conversion = parts["conversion"]
    assert conversion["round_trip_exact"] and conversion["weight_change_max"] > 0
    assert conversion["logprob_gap"] < LOGPROB_TOLERANCE and conversion["logprob_gap_after_step"] < LOGPROB_TOLERANCE
    server = parts["server"]
    assert server["tokens_per_s_alone"] > 0 and server["tokens_per_s_batched"] > 0 and server["logprob_gap"] < LOGPROB_TOLERANCE
    # The one GPU-marked test needs two GPUs: collected under the device's packages, and skipped here.
    tests = parts["gpu_tests"]
    assert tests["status"] == "ok" and tests["counts"]["skipped"] >= 1 and tests["counts"]["failed"] == 0
    assert report["travel"]["fits"] and report["travel"]["total_mib"] < 64
    assert report["estimate"]["fits"] and report["estimate"]["total_s"] <= RUN_BUDGET_S
    assert 3e8 < report["estimate"]["parameters"] < 1e9
    # Our own code imports nothing the GPU machine lacks (megatron-core's optional imports may be
    # refused); a fresh clone's venv lies inside the repository, and its files are not ours.
    ours = [b for b in report["blocked_imports"]
            if b["importer"].startswith(str(ROOT)) and not b["importer"].startswith(sys.prefix + os.sep)]
    assert ours == []
    table = (tmp_path / "gpu-check.md").read_text()
    assert all(f"| {name} |" in table for name, _ in PARTS) and "OK" in done.stdout


# A stand-in for bench/gpu_parts.py speaking its results protocol: each part named in WORKER_PARTS
# behaves as the test needs (the runner is what is under test).
STAND_IN = '''
import argparse, json, os, sys, time
parser = argparse.ArgumentParser()
for flag in ("--size", "--cache", "--results"):
    parser.add_argument(flag)
parser.add_argument("--require-cuda", action="store_true")
parser.add_argument("parts", nargs="+")
args = parser.parse_args()
def write(line):
    with open(args.results, "a") as out:
        out.write(json.dumps(line) + "\\n")
write({"event": "device", "python": sys.version.split()[0]})
for part in args.parts:
    write({"part": part, "event": "started"})
    if part == "torch_trainer":
        write({"part": part, "status": "failed", "seconds": 0.1, "error": "RuntimeError: CUDA out of memory"})
        continue
    if part == "megatron_trainer":
        os._exit(3)
    if part == "conversion":
        time.sleep(60)
    write({"part": part, "status": "ok", "seconds": 0.1})
'''


def _run(tmp_path, worker: str, source: str) -> dict:
    (tmp_path / f"{worker}.py").write_text(source)
    args = SimpleNamespace(out=tmp_path, size="tiny", cache=str(tmp_path), dry_run=False)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    report = {"parts": {}}
    gpu_check.run_worker(args, env, report, gpu_check.Clock(RUN_BUDGET_S), worker=worker)
    return report


def test_a_part_that_fails_crashes_its_worker_or_hangs_fails_alone(tmp_path, monkeypatch):
    monkeypatch.setitem(gpu_check.LIMITS, "conversion", 1.0)
    report = _run(tmp_path, "stand_in_worker", STAND_IN)
    parts = report["parts"]
    assert parts["model"]["status"] == "ok" and parts["server"]["status"] == "ok"  # after two restarts
    assert parts["torch_trainer"]["status"] == "failed" and "out of memory" in parts["torch_trainer"]["error"]
    assert parts["megatron_trainer"]["status"] == "failed"
    assert "exited with status 3 during this part" in parts["megatron_trainer"]["error"]
    assert parts["conversion"]["status"] == "failed" and "timed out (limit 1.0 s" in parts["conversion"]["error"]
    assert report["device"]["python"]


def test_a_worker_that_dies_on_import_fails_every_part_with_its_error_once(tmp_path):
    report = _run(tmp_path, "broken_worker", "raise ModuleNotFoundError(\"No module named 'omegaconf'\")\n")
    errors = [report["parts"][name]["error"] for name in WORKER_PARTS]
    assert all("No module named 'omegaconf'" in error for error in errors), errors
    assert (tmp_path / "worker.log").read_text().count("Traceback") == 1  # not restarted for each part
