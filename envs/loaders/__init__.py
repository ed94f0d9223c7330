"""Task loaders, one per format, registered by format name; `detect_format` picks one for a path.

Each loader is `load(source, split, ids) -> TaskSet`: the tasks of `split` ("all" = every
split) whose id is in `ids` (empty = all), and the malformed rows it skipped.

Detection: "builtin" is the built-in suite and "micro" the generated tasks (envs/micro.py); a
directory holding task.toml or instruction.md (itself or in a subdirectory) is "harbor"; otherwise the rows of the file (or of the
.jsonl/.json/.parquet files under the directory) decide: rows with image_name or repo_path
are "swesmith", rows with test_patch or base_commit are "swebench".
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable, Dict, Sequence

from envs.loaders import harbor, swebench, swesmith
from envs.loaders.common import sniff_keys
from envs.tasks import ALL_SPLITS, TaskSet

Loader = Callable[[str, str, Sequence[str]], TaskSet]


def load_builtin(source: str, split: str, ids: Sequence[str]) -> TaskSet:
    """The built-in suite (splits "train" and "eval"); `source` is ignored."""
    from envs.builtin.suite import SPLITS, load_builtin as load_suite

    names = SPLITS if split == ALL_SPLITS else (split,)
    tasks = [task if task.split else replace(task, split=name) for name in names for task in load_suite(name, ids)]
    return TaskSet(tasks=tasks, splits=set(SPLITS))


def load_micro(source: str, split: str, ids: Sequence[str]) -> TaskSet:
    """The generated one-function tasks (splits "train" and "eval"); `source` is ignored."""
    from envs.micro import SPLIT_SIZES, load_micro as load_generated

    names = tuple(SPLIT_SIZES) if split == ALL_SPLITS else (split,)
    return TaskSet(tasks=[task for name in names for task in load_generated(name, ids)], splits=set(SPLIT_SIZES))


LOADERS: Dict[str, Loader] = {
    "builtin": load_builtin,
    "micro": load_micro,
    "swebench": swebench.load,
    "swesmith": swesmith.load,
    "harbor": harbor.load,
}

# Sources that are names, not paths: their loaders generate or ship the tasks themselves.
NAMED_SOURCES = ("builtin", "micro")


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
    if "image_name" in keys or "repo_path" in keys:
        return "swesmith"
    if "test_patch" in keys or "base_commit" in keys:
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
