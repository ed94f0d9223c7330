"""SWE-smith rows (JSONL, a JSON list, or parquet) -> Task.

A SWE-smith task is a bug-inducing diff: `patch` breaks the repository, and the fix (the gold
patch) is its reverse. Fields read: instance_id, patch, FAIL_TO_PASS, PASS_TO_PASS (lists or
JSON-encoded strings), problem_statement (non-empty), and either
  - image_name (the SWE-smith dataset): the clean repository lives in the image at /testbed;
    setup applies the bug patch there (`git apply`), workspace_dir is "" (container backends
    only), test_files is empty (the tests are not readable without the image); or
  - repo_path (our extension, written by `swerve tasks synth`): a local directory holding the
    clean repository (relative paths are relative to the source directory, or to the source
    file's directory). The buggy workspace = a copy of repo_path without .git (so `git diff`
    cannot reveal the bug) with the bug patch applied (`patch -p1`, else `git apply`), cached
    content-addressed under ~/.cache/swerve/tasks/swesmith-<hash>/ ($SWERVE_CACHE_DIR
    overrides the root) and written atomically; test_files = the clean repository's test files
    (tests/ and test/ directories, test_*.py, *_test.py, conftest.py, pytest.ini, tox.ini,
    setup.cfg, pyproject.toml); these tasks run in the local sandbox.
Optional: repo (default: the repo_path directory name or the image name), stratum, split, and
hidden_cases (our extension, written by `swerve tasks synth`): a list of {"module", "function",
"args_json", "expected_json"} (or its JSON text), the calls the grader makes beside the tests, each
optionally with HiddenCase's method, attribute and exception fields (envs/tasks/task.py): init_json,
steps_json (JSON text), result_attrs (a list of names), objects (a bool), raises ("module.qualname").
test_command = pytest with `-rA`.

Not supported: SWE-smith's per-repository test commands and log parsers (pytest only), and
checking out a task branch of the SWE-smith mirror repositories.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

from envs.tasks.cache import build_dir_once, cache_root
from envs.tasks.loaders.common import (ACTIVATE_TESTBED, RowError, collect_rows, optional_str, path_globs, require_str,
                                 reverse_patch, row_split, selected, test_list, tree_hash)
from envs.tasks.pytest_summary import PYTEST_COMMAND
from envs.tasks.task import ALL_SPLITS, HiddenCase, Task, TaskSet

FORMAT = "swesmith"
TEST_COMMAND = PYTEST_COMMAND
IMAGE_SETUP = (ACTIVATE_TESTBED,)
_IGNORED_DIRS = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".tox", ".venv", ".hg"}
_TEST_DIRS = {"tests", "test", "testing"}
_TEST_CONFIGS = {"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"}


def _ignored(relative: Path) -> bool:
    return bool(_IGNORED_DIRS.intersection(relative.parts)) or relative.suffix in (".pyc", ".pyo")


def is_test_file(relative: Path) -> bool:
    name = relative.name
    return (bool(_TEST_DIRS.intersection(relative.parts[:-1])) or name in _TEST_CONFIGS
            or (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))))


def apply_patch(workdir: Path, diff: str) -> None:
    """Apply a unified diff in workdir with `patch -p1`, or `git apply` when patch refuses it."""
    with tempfile.NamedTemporaryFile("w", suffix=".diff", delete=False) as handle:
        handle.write(diff)
    try:
        attempts = [
            (["patch", "-p1", "--batch", "--forward", "--dry-run", "-i", handle.name],
             ["patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "-i", handle.name]),
            (["git", "apply", "--check", handle.name], ["git", "apply", handle.name]),
        ]
        errors = []
        for check, apply in attempts:
            if shutil.which(check[0]) is None:
                errors.append(f"{check[0]} not installed")
                continue
            probe = subprocess.run(check, cwd=workdir, capture_output=True, text=True)
            if probe.returncode == 0:
                done = subprocess.run(apply, cwd=workdir, capture_output=True, text=True)
                if done.returncode == 0:
                    return
                probe = done
            errors.append(f"{check[0]}: {(probe.stdout + probe.stderr).strip()[-300:]}")
        raise RowError("patch", "does not apply to repo_path: " + " | ".join(errors))
    finally:
        Path(handle.name).unlink()


class _Repos:
    """Per-load memo of each clean repository's content hash and test files."""

    def __init__(self, base: Path, workspace_root: Optional[Path] = None):
        self.base = base
        self.workspace_root = workspace_root  # None: envs.tasks.cache.cache_root()
        self._hash: Dict[Path, str] = {}
        self._tests: Dict[Path, tuple] = {}

    def resolve(self, repo_path: str) -> Path:
        path = Path(repo_path).expanduser()
        path = path if path.is_absolute() else self.base / path
        if not path.is_dir():
            raise RowError("repo_path", f"not a directory: {path}")
        return path.resolve()

    def content_hash(self, repo: Path) -> str:
        if repo not in self._hash:
            self._hash[repo] = tree_hash(repo, _ignored)
        return self._hash[repo]

    def test_files(self, repo: Path) -> tuple:
        if repo not in self._tests:
            files = []
            for path in sorted(repo.rglob("*")):
                relative = path.relative_to(repo)
                if path.is_file() and not _ignored(relative) and is_test_file(relative):
                    try:
                        files.append((relative.as_posix(), path.read_text(encoding="utf-8")))
                    except UnicodeDecodeError:
                        continue  # binary fixtures cannot be restored as text; left as they are
            self._tests[repo] = tuple(files)
        return self._tests[repo]


def materialize(repo: Path, repo_hash: str, bug_patch: str, root: Optional[Path] = None) -> Path:
    """The buggy workspace: a cached copy of repo with bug_patch applied (content-addressed),
    under root (None: envs.tasks.cache.cache_root())."""
    key = hashlib.sha256(f"{repo_hash}\0{bug_patch}".encode()).hexdigest()[:16]

    def build(out: Path) -> None:
        shutil.copytree(repo, out, ignore=shutil.ignore_patterns(*_IGNORED_DIRS, "*.pyc"), symlinks=True)
        apply_patch(out, bug_patch)

    return build_dir_once((root or cache_root()) / "tasks" / f"swesmith-{key}", build)


def _image_setup(bug_patch: str) -> tuple:
    marker = "SWERVE_PATCH_" + hashlib.sha256(bug_patch.encode()).hexdigest()[:12]
    body = bug_patch if bug_patch.endswith("\n") else bug_patch + "\n"
    return IMAGE_SETUP + (f"git apply --whitespace=nowarn - <<'{marker}'\n{body}{marker}",)


_HIDDEN_KEYS = ("module", "function", "args_json", "expected_json")
# The method, attribute and exception fields of HiddenCase (envs/tasks/task.py): absent means unset.
_OPTIONAL_HIDDEN_KEYS = ("init_json", "steps_json", "result_attrs", "objects", "raises")


def hidden_cases(row: dict) -> tuple:
    """The row's hidden cases; none when the field is absent (SWE-smith's own rows)."""
    value = row.get("hidden_cases")
    if value is None:
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise RowError("hidden_cases", f"not a JSON-encoded list: {error}") from None
    if hasattr(value, "tolist"):  # numpy arrays from some parquet readers
        value = value.tolist()
    if not isinstance(value, list):
        raise RowError("hidden_cases", f"expected a list of objects, got {type(value).__name__}")
    return tuple(_hidden_case(index, entry) for index, entry in enumerate(value))


def _dotted(name: str) -> bool:
    return bool(name) and all(part.isidentifier() for part in name.split("."))


def _json_list(text: str, key: str, bad: Callable[[str], RowError]) -> list:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise bad(f"{key} is not JSON: {error}") from None
    if not isinstance(value, list):
        raise bad(f"{key} must be a JSON list, got {type(value).__name__}")
    return value


def _hidden_case(index: int, entry) -> HiddenCase:
    def bad(reason: str) -> RowError:
        return RowError("hidden_cases", f"entry {index}: {reason}")

    keys = set(entry) if isinstance(entry, dict) else set()
    if not isinstance(entry, dict) or not set(_HIDDEN_KEYS) <= keys <= set(_HIDDEN_KEYS + _OPTIONAL_HIDDEN_KEYS):
        keys = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        raise bad(f"expected an object with the keys {', '.join(_HIDDEN_KEYS)} and optionally "
                  f"{', '.join(_OPTIONAL_HIDDEN_KEYS)}, got {keys}")
    if not all(isinstance(entry.get(key, ""), str) for key in _HIDDEN_KEYS + ("init_json", "steps_json", "raises")):
        raise bad("every value but result_attrs and objects must be a string")
    module, function = entry["module"], entry["function"]
    if not _dotted(module):
        raise bad(f"module {module!r} is not a dotted module name")
    if not _dotted(function):
        raise bad(f"function {function!r} is not a dotted name of identifiers")
    _json_list(entry["args_json"], "args_json", bad)
    try:
        json.loads(entry["expected_json"])
    except json.JSONDecodeError as error:
        raise bad(f"expected_json is not JSON: {error}") from None
    init_json, steps_json = entry.get("init_json", ""), entry.get("steps_json", "")
    if init_json:
        _json_list(init_json, "init_json", bad)
        if "." not in function:
            raise bad(f"init_json needs function to be Class.method, got {function!r}")
    if steps_json:
        if not init_json:
            raise bad("steps_json needs a receiver (init_json)")
        for step in _json_list(steps_json, "steps_json", bad):
            if not (isinstance(step, list) and len(step) == 2 and isinstance(step[0], str)
                    and step[0].isidentifier() and isinstance(step[1], list)):
                raise bad(f"steps_json entries must be [method name, args list], got {json.dumps(step)[:80]}")
    attrs = entry.get("result_attrs", [])
    if hasattr(attrs, "tolist"):
        attrs = attrs.tolist()
    if not (isinstance(attrs, list) and all(isinstance(name, str) and name.isidentifier() for name in attrs)):
        raise bad(f"result_attrs must be a list of attribute names, got {json.dumps(attrs, default=repr)[:80]}")
    objects = entry.get("objects", False)
    if not isinstance(objects, bool):
        raise bad(f"objects must be true or false, got {type(objects).__name__}")
    raises = entry.get("raises", "")
    if raises and not (_dotted(raises) and "." in raises):
        raise bad(f"raises {raises!r} is not a module.qualname of an exception class")
    return HiddenCase(module, function, entry["args_json"], entry["expected_json"], init_json, steps_json,
                      tuple(attrs), objects, raises)


def row_to_task(row: dict, repos: _Repos, split: str, ids: Sequence[str]) -> Task:
    if not isinstance(row, dict):
        raise RowError("row", f"expected a JSON object, got {type(row).__name__}")
    instance_id = require_str(row, "instance_id", allow_empty=False)
    bug_patch = require_str(row, "patch", allow_empty=False)
    fields = dict(
        id=instance_id,
        problem_statement=require_str(row, "problem_statement", allow_empty=False),
        test_command=TEST_COMMAND,
        fail_to_pass=test_list(row, "FAIL_TO_PASS"),
        pass_to_pass=test_list(row, "PASS_TO_PASS"),
        gold_patch=reverse_patch(bug_patch),
        stratum=optional_str(row, "stratum") or "unknown",
        # The mutation's kind (`swerve tasks synth` writes it): what a fresh task shares with others.
        family=optional_str(row, "family"),
        split=row_split(row),
        source=FORMAT,
        hidden_cases=hidden_cases(row),
        **path_globs(row),
    )
    repo_path = optional_str(row, "repo_path")
    image = optional_str(row, "image_name")
    if not repo_path and not image:
        raise RowError("repo_path", "missing (a SWE-smith row needs repo_path or image_name)")
    if not selected(fields["split"], instance_id, split, ids):
        return Task(repo="", workspace_dir="", test_files=(), **fields)  # counted for its split only
    if repo_path:
        repo = repos.resolve(repo_path)
        try:
            workspace = materialize(repo, repos.content_hash(repo), bug_patch, repos.workspace_root)
        except OSError as error:
            raise RowError("repo_path", f"cannot copy {repo}: {error}") from None
        return Task(repo=optional_str(row, "repo") or repo.name, workspace_dir=str(workspace),
                    test_files=repos.test_files(repo), **fields)
    return Task(repo=optional_str(row, "repo") or image, workspace_dir="", test_files=(),
                setup=_image_setup(bug_patch), image=image, **fields)


def load(source: str, split: str, ids: Sequence[str]) -> TaskSet:
    path = Path(source).expanduser()
    repos = _Repos(path if path.is_dir() else path.parent)
    return collect_rows(path, lambda row: row_to_task(row, repos, split, ids), split, ids)


def row_converter(base: Path, workspace_root: Optional[Path] = None) -> Callable[[dict], Task]:
    """Row -> Task for rows that come from elsewhere than a row file (a task stream,
    envs/tasks/synth/stream.py): every row is taken whatever its split, a relative repo_path is
    relative to base, workspaces are built under workspace_root (None: envs.tasks.cache.cache_root()).
    Each repository's hash and test files are computed once for all the calls. RowError for a
    malformed row."""
    repos = _Repos(base, workspace_root)
    return lambda row: row_to_task(row, repos, ALL_SPLITS, ())
