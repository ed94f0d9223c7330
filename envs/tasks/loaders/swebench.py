"""SWE-bench rows (JSONL, a JSON list, or parquet such as the Verified dataset) -> Task.

Fields read: instance_id, repo, base_commit, patch, test_patch, problem_statement,
FAIL_TO_PASS, PASS_TO_PASS (lists, or JSON-encoded strings of lists as in the parquet
files); optional: hints_text, version, environment_setup_commit, difficulty (-> stratum),
split, image_name, hidden_cases (swerve's extension, in the SWE-smith loader's format: the
built-in suite's image rows carry theirs). The repository lives in SWE-bench's per-instance image
(`swebench/sweb.eval.x86_64.<instance_id, "__" -> "_1776_", lower case>:latest`, or the row's
image_name: envs/image_suite.py's rows name their own) at /testbed, so workspace_dir is "" and
these tasks need a container backend.
gold_patch = patch; test_patch is kept for the grader to apply before the tests run.

Not supported: SWE-bench's per-repository test commands and log parsers. test_command is
pytest with `-rA` (what the grader parses), which fits pytest-based repositories; tasks of
repositories graded by other runners (django's runtests.py, sympy's bin/test) will not grade.
hints_text, version and environment_setup_commit are read for validation only.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from envs.tasks.loaders.common import (ACTIVATE_TESTBED, RowError, collect_rows, optional_str, path_globs, require_str,
                                 row_split, test_list)
from envs.tasks.loaders.swesmith import hidden_cases
from envs.tasks.task import Task, TaskSet

FORMAT = "swebench"
IMAGE_TEMPLATE = "swebench/sweb.eval.x86_64.{}:latest"
SETUP = (ACTIVATE_TESTBED,)
TEST_COMMAND = "python -m pytest --no-header -rA --tb=no -p no:cacheprovider"


def image_name(instance_id: str) -> str:
    """SWE-bench's per-instance evaluation image (Docker names are lower case)."""
    return IMAGE_TEMPLATE.format(instance_id.replace("__", "_1776_")).lower()


def row_to_task(row: dict) -> Task:
    if not isinstance(row, dict):
        raise RowError("row", f"expected a JSON object, got {type(row).__name__}")
    instance_id = require_str(row, "instance_id", allow_empty=False)
    for name in ("hints_text", "version", "environment_setup_commit"):
        optional_str(row, name)
    require_str(row, "base_commit", allow_empty=False)
    stratum = optional_str(row, "stratum") or optional_str(row, "difficulty") or "unknown"
    return Task(
        id=instance_id,
        repo=require_str(row, "repo", allow_empty=False),
        workspace_dir="",
        problem_statement=require_str(row, "problem_statement", allow_empty=False),
        test_command=TEST_COMMAND,
        fail_to_pass=test_list(row, "FAIL_TO_PASS"),
        pass_to_pass=test_list(row, "PASS_TO_PASS"),
        gold_patch=require_str(row, "patch", allow_empty=False),
        stratum=stratum,
        test_files=(),
        setup=SETUP,
        split=row_split(row),
        source=FORMAT,
        image=optional_str(row, "image_name") or image_name(instance_id),
        test_patch=require_str(row, "test_patch"),
        hidden_cases=hidden_cases(row),
        **path_globs(row),
    )


def load(source: str, split: str, ids: Sequence[str]) -> TaskSet:
    return collect_rows(Path(source).expanduser(), row_to_task, split, ids)
