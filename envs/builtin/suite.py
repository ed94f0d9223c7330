"""Materialize the built-in tasks: buggy workspaces in a content-addressed cache, gold patches by difflib.

`tasks.json` describes each task as one line edit applied to a correct repository in
`repos/`: the line `old` (correct) becomes `new` (buggy). Workspaces live under
`~/.cache/swerve/tasks/<content-hash>/<task id>/` ($SWERVE_CACHE_DIR instead of ~/.cache/swerve
when set), so editing the suite never reuses stale ones.

A row's `hidden` lists calls `{"call": "<dotted.module>:<function>", "args": [...]}` graded
beside the tests (Task.hidden_cases); their expected values are computed by running them on the
correct repository (envs/builtin/hidden.py), never written in tasks.json, so they cannot drift
from the code. They are cached under the same content hash, in `<cache>/hidden/` (the suite
hash's folder holds workspaces only).
"""
from __future__ import annotations

import difflib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from envs.builtin.hidden import RUNNER_DIGEST, Call, parse_call, run_calls
from envs.cache import build_dir_once, cache_root
from envs.pytest_summary import PYTEST_COMMAND
from envs.tasks import HiddenCase, Task

SUITE_DIR = Path(__file__).resolve().parent
REPOS_DIR = SUITE_DIR / "repos"
TASKS_FILE = SUITE_DIR / "tasks.json"
SPLITS = ("train", "eval")
_IGNORED = {"__pycache__", ".pytest_cache"}


def repo_files(repo_dir: Path) -> List[Path]:
    """A repository's files (relative, sorted) without caches: what a task's copy and image hold."""
    files = []
    for path in sorted(repo_dir.rglob("*")):
        relative = path.relative_to(repo_dir)
        if path.is_file() and not _IGNORED.intersection(relative.parts):
            files.append(relative)
    return files


def suite_hash() -> str:
    """Hash of tasks.json and every repository file: the cache key."""
    digest = hashlib.sha256(TASKS_FILE.read_bytes())
    for repo_dir in sorted(p for p in REPOS_DIR.iterdir() if p.is_dir()):
        for relative in repo_files(repo_dir):
            digest.update(f"{repo_dir.name}/{relative.as_posix()}\0".encode())
            digest.update((repo_dir / relative).read_bytes())
    return digest.hexdigest()[:16]


def _inject(source: str, old: str, new: str, where: str) -> str:
    lines = source.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.rstrip("\n") == old]
    if len(hits) != 1:
        raise ValueError(f"{where}: the line to replace must occur exactly once, found {len(hits)}: {old!r}")
    lines[hits[0]] = new + "\n"
    return "".join(lines)


def _gold_patch(relative: str, buggy: str, fixed: str) -> str:
    diff = difflib.unified_diff(
        buggy.splitlines(keepends=True),
        fixed.splitlines(keepends=True),
        fromfile=f"a/{relative}",
        tofile=f"b/{relative}",
    )
    return "".join(diff)


def _materialize(row: dict, buggy: str, target: Path) -> None:
    def populate(workspace: Path) -> None:
        shutil.copytree(REPOS_DIR / row["repo"], workspace, ignore=shutil.ignore_patterns(*_IGNORED))
        (workspace / row["file"]).write_text(buggy)

    build_dir_once(target, populate)


def _check_repos(suite: dict) -> None:
    """Splits are set per repository (so no repository can be on both sides): each needs a known one."""
    unknown = sorted({row["repo"] for row in suite["tasks"]} - set(suite["repos"]))
    if unknown:
        raise ValueError(f"{TASKS_FILE}: tasks name repositories missing from 'repos': {unknown}")
    for name, meta in suite["repos"].items():
        if meta.get("split") not in SPLITS:
            raise ValueError(f"{TASKS_FILE}: repository {name!r} has split {meta.get('split')!r}; allowed: {list(SPLITS)}")


def hidden_calls(row: dict) -> List[Call]:
    """The row's hidden calls as (module, function, args); [] for a row without any."""
    calls = []
    for entry in row.get("hidden", []):
        if set(entry) != {"call", "args"} or not isinstance(entry["args"], list):
            raise ValueError(f"task {row['id']}: a hidden call is {{'call': 'module:function', 'args': [...]}}, got {entry!r}")
        calls.append((*parse_call(entry["call"]), entry["args"]))
    return calls


def compute_expected(suite: dict) -> Dict[str, List[str]]:
    """task id -> the JSON text each hidden call returns on the correct repository; one child
    interpreter per repository. A call that raises or returns a non-plain value is an error."""
    expected: Dict[str, List[str]] = {}
    for repo in suite["repos"]:
        rows = [row for row in suite["tasks"] if row["repo"] == repo and row.get("hidden")]
        calls = [(row["id"], call) for row in rows for call in hidden_calls(row)]
        if not calls:
            continue
        outcomes = run_calls(REPOS_DIR / repo, [call for _, call in calls])
        for (task_id, (module, function, args)), outcome in zip(calls, outcomes):
            if "error" in outcome:
                raise ValueError(f"task {task_id}: hidden call {module}:{function}(*{json.dumps(args)}) on the "
                                 f"correct repository {repo}: {outcome['error']}")
            expected.setdefault(task_id, []).append(outcome["result"])
    return expected


def _write_atomically(path: Path, text: str) -> None:
    # A concurrent loader reads either no file or a whole one.
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    with os.fdopen(handle, "w") as stream:
        stream.write(text)
    os.replace(staging, path)


def expected_values(suite: dict, cache: Path, key: str) -> Dict[str, List[str]]:
    """compute_expected, cached under `cache` (a cache root) per suite hash `key` and runner version."""
    path = cache / "hidden" / f"builtin-{key}-{RUNNER_DIGEST}.json"
    if path.is_file():
        return json.loads(path.read_text())
    expected = compute_expected(suite)
    _write_atomically(path, json.dumps(expected, indent=1, sort_keys=True))
    return expected


def _hidden_cases(row: dict, expected: Sequence[str]) -> tuple[HiddenCase, ...]:
    return tuple(
        HiddenCase(module=module, function=function, args_json=json.dumps(args), expected_json=result)
        for (module, function, args), result in zip(hidden_calls(row), expected, strict=True)
    )


def load_builtin(split: str, ids: Sequence[str] = (), cache_dir: Optional[str] = None) -> List[Task]:
    """The tasks of one split; workspaces under `cache_dir` (None: envs.cache.cache_root())."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} for source 'builtin'; allowed splits: {list(SPLITS)}")
    suite = json.loads(TASKS_FILE.read_text())
    _check_repos(suite)
    cache = Path(cache_dir).expanduser() if cache_dir else cache_root()
    key = suite_hash()
    root = cache / "tasks" / key
    expected = expected_values(suite, cache, key)
    tasks = []
    for row in suite["tasks"]:
        if suite["repos"][row["repo"]]["split"] != split or (ids and row["id"] not in ids):
            continue
        repo_dir = REPOS_DIR / row["repo"]
        fixed = (repo_dir / row["file"]).read_text()
        buggy = _inject(fixed, row["old"], row["new"], f"task {row['id']}")
        target = root / row["id"]
        _materialize(row, buggy, target)
        test_files = tuple(
            (relative.as_posix(), (repo_dir / relative).read_text())
            for relative in repo_files(repo_dir)
            if relative.parts[0] == "tests" or relative.name == "pytest.ini"
        )
        tasks.append(
            Task(
                id=row["id"],
                repo=f"swerve-builtin/{row['repo']}",
                workspace_dir=str(target),
                problem_statement=row["problem_statement"],
                test_command=PYTEST_COMMAND,
                fail_to_pass=tuple(row["fail_to_pass"]),
                pass_to_pass=tuple(row["pass_to_pass"]),
                gold_patch=_gold_patch(row["file"], buggy, fixed),
                stratum=row["stratum"],
                test_files=test_files,
                split=split,
                source="builtin",
                family=row.get("family", ""),
                hidden_cases=_hidden_cases(row, expected.get(row["id"], [])),
            )
        )
    return tasks
