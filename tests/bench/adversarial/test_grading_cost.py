"""grading bench: both shapes graded under both isolations, the gold fix resolving each time; the
figure is the worst shape's per_test / suite median (structure and bookkeeping, never timing)."""
import pytest

from bench.adversarial import grading_cost
from configs import Config


@pytest.mark.slow  # grades a built-in and a SWE-bench-shaped task twice each
def test_one_repetition_reports_both_shapes_and_their_ratio(tmp_path):
    cfg = Config()
    cfg.sandbox.workdir_root = str(tmp_path)
    result = grading_cost.grading_cost(cfg, repetitions=1)
    details = result["details"]
    assert set(details["median_s"]) == set(grading_cost.SHAPES)
    for shape, by_isolation in details["median_s"].items():
        assert by_isolation["suite"] > 0 and by_isolation["per_test"] > 0
        assert details["ratios"][shape] == by_isolation["per_test"] / by_isolation["suite"]
    assert result["ratio"] == max(details["ratios"].values())
    assert result["met"] == (result["ratio"] <= grading_cost.TARGET_RATIO)
    assert details["tests_listed"]["builtin"] >= 2 and details["host_peak_rss_mb"] > 0
