"""Is a stage better than the one before it? Paired per-task comparisons with bootstrap intervals.

Two evaluations of the same tasks are compared task by task: each task's pass@1 (resolved / scored
attempts) under stage B minus under stage A. The delta is the mean of those differences; its 95%
interval comes from resampling tasks with replacement (the task, not the attempt, is the unit: the
attempts of one task are not independent). Pairing removes the spread between easy and hard tasks,
which dominates a per-stage interval, so a real gain shows with far fewer tasks than comparing two
unpaired means would need.
"""
from __future__ import annotations

import random
from typing import Mapping, Sequence

DEFAULT_RESAMPLES = 4000
DEFAULT_SEED = 0


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 1]."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (pos - lo) * (sorted_values[hi] - sorted_values[lo])


def bootstrap_mean(values: Sequence[float], resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                   confidence: float = 0.95) -> dict:
    """{"mean", "ci95_low", "ci95_high", "n", "resamples"}: percentile bootstrap of the mean."""
    if not values:
        raise ValueError("bootstrap of no values: no task was scored in both evaluations")
    if resamples < 1:
        raise ValueError(f"resamples is {resamples}; it must be at least 1")
    values = list(values)
    n = len(values)
    rng = random.Random(seed)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    tail = (1.0 - confidence) / 2.0
    return {"mean": sum(values) / n, "ci95_low": _percentile(means, tail),
            "ci95_high": _percentile(means, 1.0 - tail), "n": n, "resamples": resamples}


def per_task_pass_at_1(report: Mapping) -> dict[str, float]:
    """task id -> resolved / scored attempts, from an eval.json report (tasks never scored are left out)."""
    return {row["task_id"]: row["resolved"] / row["n"] for row in report["per_task"] if row["n"] > 0}


def paired_delta(before: Mapping, after: Mapping, resamples: int = DEFAULT_RESAMPLES,
                 seed: int = DEFAULT_SEED) -> dict:
    """Stage `after` minus stage `before` (two eval.json reports of the same tasks):
    {"delta", "ci95_low", "ci95_high", "tasks", "better", "worse", "same", "resamples", "seed"}."""
    a, b = per_task_pass_at_1(before), per_task_pass_at_1(after)
    shared = sorted(set(a) & set(b))
    if not shared:
        raise ValueError("the two evaluations share no scored task: evaluate both stages on the same tasks")
    diffs = [b[t] - a[t] for t in shared]
    boot = bootstrap_mean(diffs, resamples, seed)
    return {"delta": boot["mean"], "ci95_low": boot["ci95_low"], "ci95_high": boot["ci95_high"],
            "tasks": len(shared), "better": sum(d > 0 for d in diffs), "worse": sum(d < 0 for d in diffs),
            "same": sum(d == 0 for d in diffs), "resamples": resamples, "seed": seed}


def paired_delta_by_family(before: Mapping, after: Mapping, resamples: int = DEFAULT_RESAMPLES,
                           seed: int = DEFAULT_SEED) -> dict[str, dict]:
    """family -> paired_delta over that family's tasks (each eval.json row names its family): a
    stage can gain overall while one family falls, and a family of 20 tasks has its own, wider
    interval. A family "fell" when its whole interval is below zero (`ci95_high < 0`)."""
    families: dict[str, set] = {}
    for row in after["per_task"]:
        families.setdefault(row.get("family", ""), set()).add(row["task_id"])
    out = {}
    for family, ids in sorted(families.items()):
        if not family:
            continue  # rows of a task source without families
        a = {"per_task": [row for row in before["per_task"] if row["task_id"] in ids]}
        b = {"per_task": [row for row in after["per_task"] if row["task_id"] in ids]}
        if set(per_task_pass_at_1(a)) & set(per_task_pass_at_1(b)):
            out[family] = paired_delta(a, b, resamples, seed)
    return out


def stage_interval(report: Mapping, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> dict:
    """One stage's pass@1 with its bootstrap 95% interval over tasks."""
    boot = bootstrap_mean(list(per_task_pass_at_1(report).values()), resamples, seed)
    return {"pass@1": boot["mean"], "ci95_low": boot["ci95_low"], "ci95_high": boot["ci95_high"]}
