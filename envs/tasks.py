"""The format-independent task record and the registry of task loaders."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence


@dataclass(frozen=True)
class Task:
    id: str
    repo: str
    # Directory holding the buggy repository state, copied into each sandbox lease.
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
    setup: tuple[str, ...] = ()
    split: str = ""
    # Where the task came from: "builtin", "swebench", "swesmith", "harbor", ...
    source: str = "builtin"
    # Container image holding the repository, for container backends (docker, e2b); "" when
    # workspace_dir alone is enough (local sandbox).
    image: str = ""
    # SWE-bench test_patch: applied (git apply) before grading instead of restoring test_files.
    test_patch: str = ""


Loader = Callable[[str, Sequence[str]], List[Task]]


def _load_builtin(split: str, ids: Sequence[str]) -> List[Task]:
    # Imported lazily so that importing envs does not touch the task cache.
    from envs.builtin.suite import load_builtin

    return load_builtin(split, ids)


LOADERS: Dict[str, Loader] = {"builtin": _load_builtin}


def load_tasks(source: str = "builtin", split: str = "train", ids: Sequence[str] = ()) -> list[Task]:
    """Tasks of one split from one source, sorted by id; `ids` (if given) selects a subset."""
    if source not in LOADERS:
        raise ValueError(f"unknown task source {source!r}; allowed sources: {sorted(LOADERS)}")
    tasks = sorted(LOADERS[source](split, tuple(ids)), key=lambda task: task.id)
    if ids:
        found = {task.id for task in tasks}
        missing = sorted(set(ids) - found)
        if missing:
            raise ValueError(f"unknown task ids for source {source!r}, split {split!r}: {missing}")
        wanted = set(ids)
        tasks = [task for task in tasks if task.id in wanted]
    return tasks
