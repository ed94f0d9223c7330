"""Malformed and duplicate task rows, through the real loader (envs.tasks.loaders.load_task_set).

Refused means: the bad row is skipped and named (row, field, reason), the good rows load.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from bench.adversarial.bad_inputs.probe import Probe, ProbeResult
from envs.tasks.loaders import load_task_set


def swebench_row(instance_id: str, **extra) -> dict:
    row = {
        "instance_id": instance_id, "repo": "owner/proj", "base_commit": "abc123",
        "patch": "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n", "test_patch": "",
        "problem_statement": f"issue {instance_id}", "FAIL_TO_PASS": ["tests/test_a.py::test_fixed"],
        "PASS_TO_PASS": ["tests/test_a.py::test_other"],
    }
    row.update(extra)
    return row


GOOD = [swebench_row("owner__proj-1"), swebench_row("owner__proj-2")]


def _line(row) -> bytes:
    return row if isinstance(row, bytes) else json.dumps(row).encode("utf-8")


def _rows_probe(bad) -> Callable[[Path], ProbeResult]:
    def run(tmp_dir: Path) -> ProbeResult:
        path = tmp_dir / "rows.jsonl"
        path.write_bytes(b"\n".join(_line(row) for row in [*GOOD, bad]) + b"\n")
        task_set = load_task_set(str(path), split="all", format="swebench")
        message = "; ".join(str(skipped) for skipped in task_set.skipped) or "no row skipped"
        kept = sorted(task.id for task in task_set.tasks) == sorted(row["instance_id"] for row in GOOD)
        return ProbeResult(kept and len(task_set.skipped) == 1, message)
    return run


def _corrupt_parquet(tmp_dir: Path) -> ProbeResult:
    # A directory of row files: the good rows in JSONL, binary garbage named .parquet.
    (tmp_dir / "good.jsonl").write_text("".join(json.dumps(row) + "\n" for row in GOOD))
    (tmp_dir / "bad.parquet").write_bytes(b"PAR1\x00\xffnot really parquet")
    task_set = load_task_set(str(tmp_dir), split="all", format="swebench")
    message = "; ".join(str(skipped) for skipped in task_set.skipped) or "no row skipped"
    return ProbeResult(len(task_set.tasks) == len(GOOD) and len(task_set.skipped) == 1, message)


def _without(row: dict, name: str) -> dict:
    return {key: value for key, value in row.items() if key != name}


PROBES = [
    Probe("task_rows_not_json", "task_rows", _rows_probe(b"{this is not json"), "not a JSON line"),
    Probe("task_rows_binary_garbage", "task_rows", _rows_probe(b"\xff\xfe\x00\x81garbage\x9c"), "invalid UTF-8"),
    Probe("task_rows_missing_field", "task_rows",
          _rows_probe(_without(swebench_row("owner__proj-3"), "FAIL_TO_PASS")), "field 'FAIL_TO_PASS': missing"),
    Probe("task_rows_wrong_type", "task_rows", _rows_probe(swebench_row("owner__proj-3", repo=7)),
          "field 'repo': expected a string, got int"),
    Probe("task_rows_empty_id", "task_rows", _rows_probe(swebench_row("")), "field 'instance_id': empty"),
    Probe("task_rows_corrupt_parquet", "task_rows", _corrupt_parquet, "not a readable parquet file"),
    Probe("task_rows_duplicate_id", "task_rows", _rows_probe(swebench_row("owner__proj-1")),
          "duplicate of rows.jsonl:1"),
]
