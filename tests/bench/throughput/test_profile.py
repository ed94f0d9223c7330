"""swerve bench profile on a real (tiny) RL run: every step cut, every kind of process found, py-spy's stacks kept."""
import dataclasses
import json

import pytest

from bench.throughput.profile import profile
from configs import load_config

pytestmark = pytest.mark.slow  # an RL run on the shared Ray


def test_profile_cuts_each_step_by_process_kind_beside_its_floor(ray_session, swerve_cache, model_path, tmp_path):
    cfg = load_config("tests/smoke.yaml", [
        f"model.cache_dir={swerve_cache}", f"tokenizer.cache_dir={swerve_cache}", f"model.path={model_path}",
        f"run.dir={tmp_path}", "trainer.total_steps=3", "rollout.drop_uniform_groups=false", "pipeline.rl_tasks=all"])
    result = profile(cfg, repetitions=1, out_dir=tmp_path / "flames")
    steps = result["steps"]
    assert [s["step"] for s in steps] == [1, 2, 3]  # the steady one: step 3
    rows = [json.loads(line) for line in (tmp_path / "profile" / "rl" / "metrics.jsonl").read_text().splitlines()]
    for step, row in zip(steps, rows):
        assert step["tokens_trained"] == row["tokens_trained"] > 0 and step["wall_s"] > 0
    # Async: a step may train what finished in the step before it, so only the running sums are ordered.
    trained = finished = 0
    for step in steps:
        trained, finished = trained + step["tokens_generated_trained"], finished + step["tokens_generated_finished"]
        assert trained <= finished
        # The run's own processes are a share of what the machine was busy with.
        assert 0 < step["run_cpu_s"] <= step["machine_busy_s"] * 1.05 + 0.5
        assert step["floor_wall_s"] > 0
    kinds = set(result["cpu_s_by_kind_mean"])
    assert {"driver", "trainer", "engine servers", "episode actors", "sandbox actors", "ray system"} <= kinds, kinds
    assert any(k.startswith("commands of ") for k in kinds)  # the agents' commands and the tests, in the sandboxes
    # py-spy sampled the long-lived kinds from step 2 on: their shares, their flame graphs.
    assert abs(sum(result["work_shares"]["trainer"].values()) - 1) < 1e-9
    assert (tmp_path / "flames" / "trainer.svg").read_text().startswith("<svg")
    assert result["ratio"] == pytest.approx(result["step_wall_s"] / result["floor_wall_s"])
    assert any("**floor**" in line for line in result["table"])
