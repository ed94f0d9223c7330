"""Reading tasks: `load_tasks` / `load_task_set` read any supported source through the loader of
its format. Loaders, one per format, are registered by format name; `detect_format` picks one
for a path.

A source is "builtin" (the suite shipped in `envs/tasks/builtin/`), "micro" (generated tasks,
`envs/tasks/micro.py`) or a path to a file or directory: "swebench" and "swesmith" rows (JSONL, JSON
list or parquet), or "harbor" task directories.

Malformed rows never abort a load: each becomes a `SkippedRow` naming the row (file and line
or row number, and the instance id when known), the field and the reason; `load_task_set`
returns them with the tasks and `load_tasks` logs their count in one line.

Each loader is `load(source, split, ids) -> TaskSet`: the tasks of `split` ("all" = every
split) whose id is in `ids` (empty = all), and the malformed rows it skipped.

Detection: "builtin" is the built-in suite and "micro" the generated tasks (envs/tasks/micro.py); a
directory holding task.toml or instruction.md (itself or in a subdirectory) is "harbor"; otherwise the rows of the file (or of the
.jsonl/.json/.parquet files under the directory) decide: rows with image_name or repo_path
are "swesmith", rows with test_patch or base_commit are "swebench".
"""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Callable, Dict, List, Sequence

from configs.schema import TasksConfig
from envs.tasks import micro
from envs.tasks.builtin import suite
from envs.tasks.loaders import harbor, swebench, swesmith
from envs.tasks.loaders.common import sniff_keys
from envs.tasks.stream import STREAM_SPLIT
from envs.tasks.task import ALL_SPLITS, DEFAULT_SPLIT, Task, TaskSet

log = logging.getLogger(__name__)

Loader = Callable[[str, str, Sequence[str]], TaskSet]


def load_builtin(source: str, split: str, ids: Sequence[str]) -> TaskSet:
    """The built-in suite (splits "train" and "eval"); `source` is ignored."""
    names = suite.SPLITS if split == ALL_SPLITS else (split,)
    tasks = [task if task.split else replace(task, split=name) for name in names for task in suite.load_builtin(name, ids)]
    return TaskSet(tasks=tasks, splits=set(suite.SPLITS))


def load_micro(source: str, split: str, ids: Sequence[str]) -> TaskSet:
    """The generated one-function tasks (splits "train" and "eval"); `source` is ignored."""
    names = tuple(micro.SPLIT_SIZES) if split == ALL_SPLITS else (split,)
    return TaskSet(tasks=[task for name in names for task in micro.load_micro(name, ids)], splits=set(micro.SPLIT_SIZES))


LOADERS: Dict[str, Loader] = {
    "builtin": load_builtin,
    "micro": load_micro,
    "swebench": swebench.load,
    "swesmith": swesmith.load,
    "harbor": harbor.load,
}

# Sources that are names, not paths: their loaders generate or ship the tasks themselves.
NAMED_SOURCES = ("builtin", "micro")
# A local Python repository read as an endless stream of bugs injected into it (tasks.split=stream).
SYNTH_FORMAT = "synth"


def detect_format(source: str) -> str:
    if source in NAMED_SOURCES:
        return source
    path = Path(source).expanduser()
    if not path.exists():
        raise ValueError(f"task source {source!r} is neither one of {list(NAMED_SOURCES)} nor an existing file or directory; "
                         f"allowed formats: {sorted(LOADERS)}")
    if path.is_dir() and harbor.task_dirs(path):
        return "harbor"
    keys = sniff_keys(path)
    # test_patch first: SWE-bench rows that name their image (envs/image_suite.py) have image_name
    # too, and SWE-smith rows never have a test_patch (their patch breaks the code; tests are in it).
    if "test_patch" in keys:
        return "swebench"
    if "image_name" in keys or "repo_path" in keys:
        return "swesmith"
    if "base_commit" in keys:
        return "swebench"
    raise ValueError(f"cannot detect the format of task source {source!r} (no Harbor task directory, no "
                     f"SWE-bench or SWE-smith rows); set tasks.format to one of {sorted(LOADERS)}")


def resolve_format(source: str, format: str = "") -> str:
    if not format:
        return detect_format(source)
    if format not in LOADERS:
        raise ValueError(f"unknown task format {format!r}; allowed formats: {sorted(LOADERS)}")
    if format not in NAMED_SOURCES and not Path(source).expanduser().exists():
        raise ValueError(f"task source {source!r} does not exist")
    return format


def load_task_set(source: str = "builtin", split: str = DEFAULT_SPLIT, ids: Sequence[str] = (),
                  format: str = "") -> TaskSet:
    """Tasks of one split (or "all") from one source, sorted by id, and the rows skipped.

    `source` is "builtin" or a path; `format` ("" = detect) is one of `LOADERS`;
    `ids` (if given) selects a subset, and an id that is not found is an error.
    """
    if split == STREAM_SPLIT:
        raise ValueError(f"split {STREAM_SPLIT!r} of {source!r} is endless: training draws from it "
                         f"(swerve train tasks.split={STREAM_SPLIT}); name a finite split to list or validate tasks")
    if format == SYNTH_FORMAT:
        raise ValueError(f"tasks.format={SYNTH_FORMAT} reads a repository as a stream of bugs: set "
                         f"tasks.split={STREAM_SPLIT}, or write rows with `swerve tasks synth --repo {source}`")
    loaded = LOADERS[resolve_format(source, format)](source, split, tuple(ids))
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
               format: str = "") -> List[Task]:
    """Tasks of one split from one source, sorted by id; `ids` (if given) selects a subset.

    Malformed rows are skipped and counted in one logged line; use `load_task_set` to see them.
    """
    task_set = load_task_set(source, split, ids, format)
    if task_set.skipped:
        first = task_set.skipped[0]
        log.warning("%s: loaded %d tasks, skipped %d malformed rows (first: %s)",
                    source, len(task_set.tasks), len(task_set.skipped), first)
    return task_set.tasks
