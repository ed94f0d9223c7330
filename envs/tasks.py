"""The format-independent task record and `load_tasks`, which reads any supported source.

A source is "builtin" (the suite shipped in `envs/builtin/`) or a path to a file or
directory. The format of a path is detected (`envs.loaders.detect_format`) unless given:
"swebench" and "swesmith" rows (JSONL, JSON list or parquet), or "harbor" task directories.
The loaders themselves, one per format, live in `envs/loaders/` and are registered in
`envs.loaders.LOADERS`.

Splits: a row (or Harbor task.toml [metadata]) may carry a `split` field; a task without one
is in split "train". `split="all"` selects every task whatever its split. The built-in suite
has the splits "train" and "eval".

Malformed rows never abort a load: each becomes a `SkippedRow` naming the row (file and line
or row number, and the instance id when known), the field and the reason; `load_task_set`
returns them with the tasks and `load_tasks` logs their count in one line.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import List, Sequence

log = logging.getLogger(__name__)

ALL_SPLITS = "all"
DEFAULT_SPLIT = "train"


@dataclass(frozen=True)
class Task:
    id: str
    repo: str
    # Directory holding the buggy repository state, copied into each sandbox lease; "" when
    # the repository lives in `image` (container backends only).
    workspace_dir: str
    problem_statement: str
    test_command: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    # Unified diff (a/ b/ prefixes) that fixes the bug; applies with `patch -p1`.
    gold_patch: str
    stratum: str
    # (relative path, pristine content): restored before grading so edited tests cannot cheat.
    test_files: tuple[tuple[str, str], ...]
    # Shell commands a container backend runs (in order, one shell) before the agent starts.
    setup: tuple[str, ...] = ()
    split: str = ""
    # Where the task came from: "builtin", "swebench", "swesmith", "harbor", ...
    source: str = "builtin"
    # Container image holding the repository, for container backends (docker, e2b); "" when
    # workspace_dir alone is enough (local sandbox).
    image: str = ""
    # SWE-bench test_patch: applied (git apply) before grading instead of restoring test_files.
    test_patch: str = ""
    # Directory with a Dockerfile that builds `image` when it cannot be pulled (Harbor's
    # environment/); "" when the image is pulled by name.
    build_context: str = ""
    # Shell script that solves the task when the fix is a script, not a diff (Harbor's
    # solution/solve.sh); the sanity gate runs it when gold_patch is empty.
    gold_script: str = ""
    # The kind of bug (micro and built-in tasks: their generator's family), for per-family
    # tables; "" when the source does not say (eval then groups by repository).
    family: str = ""
    # Globs (fnmatch, workspace-relative) the agent may not change beyond the format's policy
    # (envs/protection.py), and globs exempted from it.
    protected_paths: tuple[str, ...] = ()
    unprotected_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class SkippedRow:
    # Which row: "<file>:<line>" (JSONL), "<file> row <n>" (JSON/parquet) or a Harbor task
    # directory, followed by "(<instance id>)" when the id could be read.
    row: str
    # The offending field, e.g. "FAIL_TO_PASS", "instance_id", "json", "task.toml".
    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.row}: field {self.field!r}: {self.reason}"


@dataclass
class TaskSet:
    tasks: List[Task] = field(default_factory=list)
    skipped: List[SkippedRow] = field(default_factory=list)
    # Every split present in the source (before filtering), to name them when a split is empty.
    splits: set = field(default_factory=set)


def load_task_set(source: str = "builtin", split: str = DEFAULT_SPLIT, ids: Sequence[str] = (),
                  format: str = "") -> TaskSet:
    """Tasks of one split (or "all") from one source, sorted by id, and the rows skipped.

    `source` is "builtin" or a path; `format` ("" = detect) is one of `envs.loaders.LOADERS`;
    `ids` (if given) selects a subset, and an id that is not found is an error.
    """
    from envs.loaders import resolve_format, LOADERS

    fmt = resolve_format(source, format)
    loaded = LOADERS[fmt](source, split, tuple(ids))
    tasks = sorted(loaded.tasks, key=lambda task: task.id)
    if not tasks and split != ALL_SPLITS and loaded.splits and split not in loaded.splits:
        raise ValueError(f"no split {split!r} in source {source!r}; splits present: "
                         f"{sorted(loaded.splits)} (or {ALL_SPLITS!r})")
    if ids:
        found = {task.id for task in tasks}
        missing = sorted(set(ids) - found)
        if missing:
            raise ValueError(f"unknown task ids for source {source!r}, split {split!r}: {missing}")
        wanted = set(ids)
        tasks = [task for task in tasks if task.id in wanted]
    return TaskSet(tasks=tasks, skipped=list(loaded.skipped), splits=set(loaded.splits))


def load_tasks(source: str = "builtin", split: str = DEFAULT_SPLIT, ids: Sequence[str] = (),
               format: str = "") -> list[Task]:
    """Tasks of one split from one source, sorted by id; `ids` (if given) selects a subset.

    Malformed rows are skipped and counted in one logged line; use `load_task_set` to see them.
    """
    task_set = load_task_set(source, split, ids, format)
    if task_set.skipped:
        first = task_set.skipped[0]
        log.warning("%s: loaded %d tasks, skipped %d malformed rows (first: %s)",
                    source, len(task_set.tasks), len(task_set.skipped), first)
    return task_set.tasks
