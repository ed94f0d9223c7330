"""Materialize the built-in tasks: buggy workspaces in a content-addressed cache, gold patches by difflib.

`tasks.json` describes each task as one line edit applied to a correct repository in
`repos/`: the line `old` (correct) becomes `new` (buggy). Workspaces live under
`~/.cache/swerve/tasks/<content-hash>/<task id>/` ($SWERVE_CACHE_DIR instead of ~/.cache/swerve
when set), so editing the suite never reuses stale ones.

A row's `hidden` lists calls `{"call": "<dotted.module>:<function>", "args": [...]}` graded
beside the tests (Task.hidden_cases); their expected values are computed by running them on the
correct repository (envs/tasks/builtin/hidden.py), never written in tasks.json, so they cannot drift
from the code. They are cached under the same content hash, in `<cache>/hidden/` (the suite
hash's folder holds workspaces only).

A call may also carry "init" (constructor args: the call is then "<module>:<Class>.<method>" on
Class(*init)), "steps" ([method, args] calls on that receiver first), "attrs" (attributes graded
instead of a returned object) and "raises": true (the correct repository raises; the class it
raises is the expected outcome). {"new": "<Class>", "args": [...]} in args, init or steps is an
object built in the call's module (HiddenCase.objects).
"""
from __future__ import annotations

import difflib
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from envs.tasks.builtin.hidden import RUNNER_DIGEST, Outcome, parse_call, run_calls
from envs.tasks.cache import build_dir_once, cache_root
from envs.tasks.pytest_summary import PYTEST_COMMAND
from envs.tasks.task import HiddenCase, Task

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


_CALL_KEYS = {"call", "args", "init", "steps", "attrs", "raises"}


def _builds_objects(value) -> bool:
    if isinstance(value, list):
        return any(_builds_objects(item) for item in value)
    return isinstance(value, dict) and (set(value) == {"new", "args"} or any(map(_builds_objects, value.values())))


def _hidden_case(task_id: str, entry: dict) -> HiddenCase:
    """One row entry as a case whose expected outcome is not known yet."""
    shapes_ok = (
        {"call", "args"} <= set(entry) <= _CALL_KEYS and isinstance(entry["args"], list)
        and isinstance(entry.get("init", []), list) and isinstance(entry.get("steps", []), list)
        and ("steps" not in entry or "init" in entry) and isinstance(entry.get("raises", False), bool)
        and isinstance(entry.get("attrs", []), list) and all(isinstance(a, str) for a in entry.get("attrs", []))
    )
    if not shapes_ok:
        raise ValueError(f"task {task_id}: a hidden call is {{'call': 'module:function', 'args': [...]}} with optional "
                         f"'init', 'steps' (needs 'init'), 'attrs' and 'raises': true, got {entry!r}")
    module, function = parse_call(entry["call"])
    return HiddenCase(
        module=module, function=function, args_json=json.dumps(entry["args"]), expected_json="",
        init_json=json.dumps(entry["init"]) if "init" in entry else "",
        steps_json=json.dumps(entry["steps"]) if "steps" in entry else "",
        result_attrs=tuple(entry.get("attrs", ())),
        objects=_builds_objects([entry["args"], entry.get("init", []), entry.get("steps", [])]),
    )


def hidden_calls(row: dict) -> List[HiddenCase]:
    """The row's hidden calls, expected outcomes not filled in; [] for a row without any."""
    return [_hidden_case(row["id"], entry) for entry in row.get("hidden", [])]


def _check_outcome(task_id: str, repo: str, entry: dict, outcome: Outcome) -> Outcome:
    """An outcome on the correct repository is expected only when it is what the row says: a
    value, or a raise where the row has "raises": true (not a typo's TypeError)."""
    wants_raise = entry.get("raises", False)
    if "error" in outcome or ("raised" in outcome) != wants_raise:
        got = outcome.get("error") or (f"raised {outcome['raised']}" if "raised" in outcome else f"returned {outcome['value']}")
        raise ValueError(f"task {task_id}: hidden call {entry['call']}(*{json.dumps(entry['args'])}) on the correct "
                         f"repository {repo}: {got}" + ("; the row expects a raise" if wants_raise else ""))
    return outcome


def compute_expected(suite: dict) -> Dict[str, List[Outcome]]:
    """task id -> the outcome of each hidden call on the correct repository; one child
    interpreter per repository. A call that errors, or raises unless the row says so, is an error."""
    expected: Dict[str, List[Outcome]] = {}
    for repo in suite["repos"]:
        rows = [row for row in suite["tasks"] if row["repo"] == repo and row.get("hidden")]
        entries = [(row["id"], entry) for row in rows for entry in row["hidden"]]
        if not entries:
            continue
        outcomes = run_calls(REPOS_DIR / repo, [case for row in rows for case in hidden_calls(row)])
        for (task_id, entry), outcome in zip(entries, outcomes, strict=True):
            expected.setdefault(task_id, []).append(_check_outcome(task_id, repo, entry, outcome))
    return expected


def _write_atomically(path: Path, text: str) -> None:
    # A concurrent loader reads either no file or a whole one.
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    with os.fdopen(handle, "w") as stream:
        stream.write(text)
    os.replace(staging, path)


def expected_values(suite: dict, cache: Path, key: str) -> Dict[str, List[Outcome]]:
    """compute_expected, cached under `cache` (a cache root) per suite hash `key` and runner version."""
    path = cache / "hidden" / f"builtin-{key}-{RUNNER_DIGEST}.json"
    if path.is_file():
        return json.loads(path.read_text())
    expected = compute_expected(suite)
    _write_atomically(path, json.dumps(expected, indent=1, sort_keys=True))
    return expected


def _hidden_cases(row: dict, expected: Sequence[Outcome]) -> tuple[HiddenCase, ...]:
    return tuple(
        replace(case, expected_json=outcome["value"], raises=outcome.get("raised", ""))
        for case, outcome in zip(hidden_calls(row), expected, strict=True)
    )


def load_builtin(split: str, ids: Sequence[str] = (), cache_dir: Optional[str] = None) -> List[Task]:
    """The tasks of one split; workspaces under `cache_dir` (None: envs.tasks.cache.cache_root())."""
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
