"""Other trainer backends and the on-policy mode through the same loop. Runs killed and resumed:
tests/actors/stages/test_pipeline.py (SIGKILL during RL, the pipeline re-run resumes its checkpoint) and
tests/actors/test_ray_job.py (a job's driver SIGKILLed, the job resubmitted with --resume); SFT's
output as the starting policy of RL: the pipeline's sft and rl stages (tests/actors/stages/test_pipeline.py)."""
import json

import pytest

from actors.stages.driver import train
from configs import load_config

pytestmark = pytest.mark.slow  # training runs


def test_megatron_backend_trains_the_on_policy_baseline_through_the_same_loop(ray_session, swerve_cache, tmp_path):
    # One run for two paths: megatron-core's trainer backend, and rollout.mode=sync (every trained token
    # from the version it trains, the baseline the async mode is measured against).
    cfg = load_config("tests/smoke.yaml", [
        f"run.dir={tmp_path}", "run.name=megatron-sync", "engine.num_engines=1", f"model.cache_dir={swerve_cache}",
        f"tokenizer.cache_dir={swerve_cache}", "rollout.max_turns=2", "rollout.max_tokens_per_turn=16",
        "trainer.total_steps=2", "trainer.backend=megatron", "rollout.mode=sync", "rollout.max_staleness=3"])
    path = train(cfg)
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in rows] == [1, 2]
    assert all(r["engine_versions"] == [r["policy_version"]] for r in rows)
    assert all(r["staleness_max"] == 0 for r in rows)  # every trained token came from the version it trains
    assert "backend: megatron" in (path / "config.yaml").read_text()
