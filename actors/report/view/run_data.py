"""A run directory as the page's data: an index (stages, steps with their metrics, eval tasks
compared across stages, the paired figures) and chunks the page parses only when opened (one per
step's trajectories, one per page of eval tasks' attempts), so a large run's page opens fast.

A run directory is a pipeline's (stage folders: base, sft, rl; summary.json), a training run's
(metrics.jsonl, trajectories/) or an eval's (eval.json, attempts.jsonl); the page shows what there is.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

# The step metrics the steps view shows (metrics.jsonl has more; the trajectory rows hold the rest).
STEP_METRICS = ("reward_mean", "resolved_rate", "truncated_rate", "infra_error_rate", "tamper_rate", "staleness_mean",
                "staleness_max", "stale_token_fraction", "turns_mean", "step_time_s", "time_rollout_wait_s",
                "policy_version")
# Eval tasks per attempts chunk: the eval view parses one page of tasks' transcripts at a time.
TASKS_PER_CHUNK = 25


@dataclass
class PageData:
    index: dict
    chunks: dict[str, object] = field(default_factory=dict)


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_json(path: Path) -> Optional[dict]:
    return json.loads(path.read_text()) if path.is_file() else None


def is_training_run(path: Path) -> bool:
    return (path / "trajectories").is_dir() or (path / "metrics.jsonl").is_file()


def is_eval(path: Path) -> bool:
    return (path / "eval.json").is_file()


def stage_dirs(root: Path, stage_order: Sequence[str]) -> list[tuple[str, Path]]:
    """(stage, folder) in the pipeline's order; a run directory that is not a pipeline's is one
    stage named after its folder."""
    found = [(stage, root / stage) for stage in stage_order
             if (root / stage).is_dir() and (is_training_run(root / stage) or is_eval(root / stage))]
    if found:
        return found
    if is_training_run(root) or is_eval(root):
        return [(root.name, root)]
    raise FileNotFoundError(f"{root} holds no run: a pipeline's stage folders ({', '.join(stage_order)}), "
                            f"a training run's metrics.jsonl and trajectories/, or an eval's eval.json; "
                            f"pass the folder that `swerve pipeline`, `swerve train` or `swerve eval` wrote")


def page_data(root: Path, stage_order: Sequence[str], pieces: Callable[[Path, list[int], list[int]], list[str]]) -> PageData:
    """The page's data for the run at `root`. `pieces(stage_dir, ids, replies)`: the text of each
    generated token (view/tokens.py; the run's tokenizer)."""
    stages = stage_dirs(root, stage_order)
    data = PageData(index={"run": root.name, "stages": [name for name, _ in stages], "steps": [],
                           "summary": read_json(root / "summary.json"), "eval": None})
    for stage, path in stages:
        if is_training_run(path):
            data.index["steps"] += _steps(stage, path, data.chunks, pieces)
    evals = [(stage, path) for stage, path in stages if is_eval(path)]
    if evals:
        data.index["eval"] = _eval(evals, data.chunks)
    return data


def _steps(stage: str, path: Path, chunks: dict, pieces) -> list[dict]:
    metrics = {row["step"]: row for row in read_jsonl(path / "metrics.jsonl")}
    steps = []
    for file in sorted((path / "trajectories").glob("step_*.jsonl")):
        step = int(file.stem.split("_")[1])
        rows = read_jsonl(file)
        for row in rows:
            tokens = row.get("tokens")
            if tokens:
                tokens["text"] = pieces(path, tokens["ids"], tokens["replies"])
        chunk = f"step-{stage}-{step}"
        chunks[chunk] = rows
        row = metrics.get(step, {})
        steps.append({"stage": stage, "step": step, "chunk": chunk, "trajectories": len(rows),
                      "trained": row.get("trained"), "groups": len({r["group_id"] for r in rows}),
                      "metrics": {name: row[name] for name in STEP_METRICS if name in row},
                      "outcomes": _count(r["outcome"] for r in rows)})
    return steps


def _count(values) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def _eval(evals: list[tuple[str, Path]], chunks: dict) -> dict:
    """Each eval task's outcomes under every stage, whether the last stage did better or worse on it
    than the one before, and its attempts' transcripts in chunks of TASKS_PER_CHUNK tasks."""
    reports = {stage: read_json(path / "eval.json") for stage, path in evals}
    attempts = {stage: read_jsonl(path / "attempts.jsonl") for stage, path in evals}
    tasks: dict[str, dict] = {}
    for stage, report in reports.items():
        for row in report.get("per_task", []):
            task = tasks.setdefault(row["task_id"], {"task_id": row["task_id"], "family": row.get("family"),
                                                     "stratum": row.get("stratum"), "stages": {}})
            scored = row["n"] - row.get("infra_error", 0)
            task["stages"][stage] = {"resolved": row["resolved"], "scored": scored, "outcomes": row["outcomes"],
                                     "pass": row["resolved"] / scored if scored else None}
    names = list(reports)
    for task in tasks.values():
        task["change"] = _change(task["stages"], names[-2:]) if len(names) > 1 else None
    ordered = sorted(tasks.values(), key=lambda t: t["task_id"])
    by_task: dict[str, dict[str, list]] = {}
    for stage, rows in attempts.items():
        for row in rows:
            by_task.setdefault(row["task_id"], {}).setdefault(stage, []).append(row)
    for start in range(0, len(ordered), TASKS_PER_CHUNK):
        chunk = f"attempts-{start // TASKS_PER_CHUNK}"
        page = ordered[start:start + TASKS_PER_CHUNK]
        chunks[chunk] = {task["task_id"]: by_task.get(task["task_id"], {}) for task in page}
        for task in page:
            task["chunk"] = chunk
    return {"stages": names, "tasks": ordered,
            "figures": {stage: {key: report.get(key) for key in ("pass@1", "pass@k", "num_tasks", "attempts",
                                                               "outcome_mix", "per_family", "tamper_rate")}
                        for stage, report in reports.items()}}


def _change(stages: dict[str, dict], compared: Sequence[str]) -> Optional[str]:
    """'better', 'worse' or 'same': the last stage's pass rate on the task against the stage before."""
    before, after = (stages.get(stage, {}).get("pass") for stage in compared)
    if before is None or after is None:
        return None
    return "better" if after > before else "worse" if after < before else "same"
