import pytest

from actors.report.significance import (bootstrap_mean, paired_delta, paired_delta_by_family, per_task_pass_at_1,
                                        stage_interval)


def report(resolved_by_task, n=4):
    return {"per_task": [{"task_id": t, "n": n, "resolved": c} for t, c in resolved_by_task.items()]}


def test_paired_delta_of_a_hand_made_example():
    # Ten tasks: stage B solves one more attempt of 4 on tasks 0-5, the same on 6-8, one fewer on 9.
    before = report({f"t{i}": 1 for i in range(10)})
    after = report({**{f"t{i}": 2 for i in range(6)}, **{f"t{i}": 1 for i in range(6, 9)}, "t9": 0})
    d = paired_delta(before, after, resamples=4000, seed=0)
    assert d["delta"] == pytest.approx((6 * 0.25 - 0.25) / 10)
    assert (d["better"], d["worse"], d["same"], d["tasks"]) == (6, 1, 3, 10)
    # The differences are 0.25 x6, 0 x3, -0.25 x1: the interval holds the mean, stays inside the
    # range of possible resample means, and excludes 0 (at most a 1e-3 share of resamples are <= 0).
    assert -0.25 <= d["ci95_low"] < d["delta"] < d["ci95_high"] <= 0.25
    assert d["ci95_low"] > 0
    assert paired_delta(before, after, resamples=4000, seed=0) == d  # seeded: the same interval


def test_paired_delta_of_identical_stages_is_zero_with_a_zero_width_interval():
    same = report({"a": 2, "b": 0, "c": 4})
    d = paired_delta(same, same)
    assert (d["delta"], d["ci95_low"], d["ci95_high"]) == (0.0, 0.0, 0.0)


def test_a_noisy_difference_has_an_interval_that_straddles_zero():
    before = report({f"t{i}": (2 if i % 2 else 1) for i in range(20)})
    after = report({f"t{i}": (1 if i % 2 else 2) for i in range(20)})
    d = paired_delta(before, after)
    assert d["delta"] == 0.0 and d["ci95_low"] < 0 < d["ci95_high"]


def test_only_tasks_scored_in_both_are_paired():
    before = {"per_task": [{"task_id": "a", "n": 4, "resolved": 0}, {"task_id": "b", "n": 0, "resolved": 0}]}
    after = report({"a": 4, "b": 4})
    assert per_task_pass_at_1(before) == {"a": 0.0}
    assert paired_delta(before, after)["tasks"] == 1
    with pytest.raises(ValueError, match="same tasks"):
        paired_delta(report({"x": 1}), report({"y": 1}))


def test_bootstrap_percentiles_match_a_hand_computed_case():
    # One value: every resample mean is that value.
    assert bootstrap_mean([0.3], resamples=10)["ci95_low"] == pytest.approx(0.3)
    interval = stage_interval(report({"a": 4, "b": 0}))
    assert interval["pass@1"] == 0.5 and interval["ci95_low"] == 0.0 and interval["ci95_high"] == 1.0
    with pytest.raises(ValueError, match="at least 1"):
        bootstrap_mean([1.0], resamples=0)


def test_per_family_deltas_pair_each_family_on_its_own_tasks():
    def rows(resolved_by_task, n=2):
        return {"per_task": [{"task_id": t, "family": t[0], "n": n, "resolved": c} for t, c in resolved_by_task.items()]}
    # Family "a" gains on every task, family "b" loses on every task: overall the two cancel.
    before = rows({"a1": 0, "a2": 0, "a3": 0, "b1": 2, "b2": 2, "b3": 2})
    after = rows({"a1": 2, "a2": 2, "a3": 2, "b1": 0, "b2": 0, "b3": 0})
    assert paired_delta(before, after)["delta"] == 0.0
    by_family = paired_delta_by_family(before, after)
    assert set(by_family) == {"a", "b"}
    assert by_family["a"]["delta"] == 1.0 and by_family["a"]["tasks"] == 3 and by_family["a"]["ci95_low"] == 1.0
    assert by_family["b"]["delta"] == -1.0 and by_family["b"]["ci95_high"] == -1.0
    # Rows of a source without families give no per-family delta.
    assert paired_delta_by_family(report({"t": 1}), report({"t": 2})) == {}
