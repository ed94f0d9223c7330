"""Restart torture: the driver (`python -m actors train` in a child process on a Ray head of our own)
is SIGKILLed three times, at random moments and once in the middle of a checkpoint save, and resumed
with --resume each time: versions continue, nothing is trained twice, nothing admitted is lost."""
import pytest
import os

from actors.training.sample_collector import COUNTERS
from bench.resilience.torture import run_torture

# make check: 200 s of the same path make test covers once (a kill, then --resume) in
# tests/actors/test_ray_job.py and tests/actors/stages/test_pipeline.py; a kill inside a checkpoint save is
# tests/policies/training/test_checkpoint.py's. Here: three kills at random moments, one of them mid-save.
pytestmark = pytest.mark.check

IDENTITY = COUNTERS[1:]
TOTAL_STEPS = 6


def test_driver_sigkilled_three_times_resumes_each_time(tmp_path, swerve_cache, capsys):
    report = run_torture(tmp_path, [f"model.cache_dir={swerve_cache}", f"tokenizer.cache_dir={swerve_cache}",
                                    "engine.num_engines=1", "rollout.max_turns=2", "rollout.max_tokens_per_turn=16"],
                         TOTAL_STEPS, seed=os.getpid())
    with capsys.disabled():
        print(f"\nrestart torture: {report['kills']}; {report['resumed']}")
    kills = report["kills"]
    assert [k["point"] for k in kills] == ["random", "mid-save", "random"]
    mid = kills[1]
    assert mid["half_written_left"] and mid["previous_checkpoint_kept"]  # the kill landed mid-save, harmlessly
    # every restart resumed from the newest complete checkpoint at its kill
    assert [r["step"] for r in report["resumed"]] == [k["latest_checkpoint"] for k in kills]
    assert report["versions"] == list(range(1, TOTAL_STEPS + 1))  # versions continue
    acc = report["accounting"]
    assert acc["admitted"] == sum(acc[k] for k in IDENTITY) and acc["in_flight"] == 0  # nothing admitted is lost
    # What was in flight at each checkpoint is exactly what its resume re-admitted (how much that is
    # depends on timing; the re-admission path with work in flight is tests/actors/training/test_sample_collector.py's).
    assert [r["readmitted"] for r in report["resumed"]] == [k["in_flight"] for k in kills]
    assert report["trained_twice"] == 0 and report["trained_samples"] == acc["trained"] >= TOTAL_STEPS
