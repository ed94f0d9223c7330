"""Which workspace paths the agent may change: one protection policy per task format.

Everything that defines, configures or extends a test run belongs to the task, never to the
agent: test files and data, `conftest.py` at any depth, test configuration, interpreter
start-up hooks, bytecode and tool caches, modules that would shadow the test machinery, the
test command's own script, and symlinks (a link can make a harmless-looking path read a
protected one). The grader (envs/grading/grader.py) runs the task's tests on the pristine workspace
plus only the changes this policy allows; a change to a protected path is tampering.

A task record may widen or narrow its format's policy: `protected_paths` adds globs,
`unprotected_paths` exempts globs (for a task whose fix really is in, say, setup.cfg).
Globs are fnmatch patterns on the workspace-relative POSIX path (`*` also matches `/`).
"""
from __future__ import annotations

import fnmatch
import importlib.machinery
import posixpath
import re
import shlex
import sys
from dataclasses import dataclass
from typing import Collection, Dict, Iterable, Mapping

from envs.grading.grader import patched_files
from envs.grading.hack_detect import UTF8_ENCODINGS, added_code_reason, python_text, source_encoding
from envs.tasks.task import Task

# Test configuration pytest (and the tools it names) reads at any depth.
TEST_CONFIG_NAMES = frozenset({"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml",
                               ".coveragerc", "noxfile.py"})
# Imported by the interpreter before any test code runs.
STARTUP_HOOK_NAMES = frozenset({"sitecustomize.py", "usercustomize.py"})
STARTUP_HOOK_SUFFIXES = (".pth",)
# Every sandbox runs with PYTHONDONTWRITEBYTECODE=1, so bytecode in the workspace was put there
# on purpose (and a .pyc beside an untouched source can run code the source does not have).
BYTECODE_SUFFIXES = (".pyc", ".pyo")
# Compiled extension modules: imported ahead of a .py of the same name, and opaque to every detector.
COMPILED_MODULE_SUFFIXES = tuple(sorted(set(importlib.machinery.EXTENSION_SUFFIXES) | {".so", ".pyd"}))
CACHE_DIRS = frozenset({"__pycache__", ".git", ".hg"})
# What ordinary tool runs leave behind (pytest's cache, type checkers, `pip install -e .`): never
# carried into the graded view, and not tampering either (an agent that runs the tests must not
# be flagged for the cache they write). Package metadata is here because its entry points can
# load pytest plugins: the graded run only ever sees the task's own.
TOOL_OUTPUT_DIRS = frozenset({".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".tox", ".nox",
                              ".venv", ".cache"})
TOOL_OUTPUT_SUFFIXES = (".egg-info", ".dist-info")
# Top-level modules a new file must not shadow: the test runner and what it imports at start.
TEST_MACHINERY_MODULES = frozenset({"pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging",
                                    "unittest", "doctest", "site", "conftest", "coverage", "xdist"})
TEST_DIRS = frozenset({"tests", "test", "testing"})
# Standard-library names a scratch file may take without shadowing anything a test run imports.
_HARMLESS_STDLIB = frozenset({"test", "this", "antigravity", "idlelib", "turtledemo"})
_SHADOWABLE_STDLIB = frozenset(sys.stdlib_module_names) - _HARMLESS_STDLIB


@dataclass(frozen=True)
class ProtectionPolicy:
    # Test-file conventions of the format: `test_*.py`, `*_test.py` and folders named like
    # TEST_DIRS are the task's (any change to them is tampering).
    test_file_conventions: bool
    # Where new top-level modules are importable ahead of the installed ones (the workspace
    # root, a src layout): a new module there named like the stdlib shadows it.
    import_roots: tuple[str, ...] = ("", "src")
    # Small single-purpose repositories (built-in, micro): a fix never needs to reach
    # into the test runner or the interpreter, so an added source line that names them is
    # tampering (code in an allowed file runs inside the test process and could rewrite
    # its reports). Off for real-world repositories, where such code is ordinary.
    forbid_machinery_references: bool = False
    # Whether a changed file may keep the non-UTF-8 source encoding its pristine version declared
    # (real repositories have latin-1 files); a declaration added or changed is tampering anyway.
    keep_pristine_encodings: bool = True
    # Whether a compiled extension module may change: never needed in a pure-Python repository.
    forbid_compiled_modules: bool = False


# One policy per task format (`Task.source`; `swerve synth` writes SWE-smith rows, so synthesised
# tasks get the swesmith policy, and a row may tighten it with protected_paths). SWE-bench-style repositories keep their own
# tests in arbitrary places, so there only the task's test_patch files, the universal
# machinery and new shadowing modules are protected; adding a new test file is allowed.
POLICIES: Dict[str, ProtectionPolicy] = {
    "builtin": ProtectionPolicy(test_file_conventions=True, forbid_machinery_references=True,
                                keep_pristine_encodings=False, forbid_compiled_modules=True),
    "micro": ProtectionPolicy(test_file_conventions=True, forbid_machinery_references=True,
                              keep_pristine_encodings=False, forbid_compiled_modules=True),
    "swebench": ProtectionPolicy(test_file_conventions=False),
    "swesmith": ProtectionPolicy(test_file_conventions=False),
    "harbor": ProtectionPolicy(test_file_conventions=True),
}


def policy_for(task: Task) -> ProtectionPolicy:
    try:
        return POLICIES[task.source]
    except KeyError:
        raise ValueError(f"no protection policy for task source {task.source!r} (task {task.id}); "
                         f"known: {sorted(POLICIES)} (add one to envs/protection.POLICIES)") from None


def task_owned_paths(task: Task) -> frozenset[str]:
    """Paths the task itself defines: restored test files, test_patch targets, the test script."""
    owned = {path for path, _ in task.test_files}
    owned.update(patched_files(task.test_patch))
    for word in shlex.split(task.test_command)[:3]:
        # `./run_tests.sh`, `bash scripts/test.sh`: a script in the workspace runs the tests.
        if not word.startswith("-") and ("/" in word or word.endswith((".sh", ".py"))) and not posixpath.isabs(word):
            owned.add(posixpath.normpath(word))
    return frozenset(owned)


def protection_reason(path: str, *, is_new: bool, is_symlink: bool, task: Task,
                      policy: ProtectionPolicy | None = None) -> str:
    """Why changing `path` is tampering, or "" when the agent may change it."""
    policy = policy or policy_for(task)
    path = posixpath.normpath(path)
    if any(fnmatch.fnmatchcase(path, glob) for glob in task.unprotected_paths):
        return ""
    if any(fnmatch.fnmatchcase(path, glob) for glob in task.protected_paths):
        return "protected by the task record"
    parts = path.split("/")
    name = parts[-1]
    if is_symlink:
        return "symlink (may point a source path at protected content)"
    if path in task_owned_paths(task):
        return "defined by the task (test file or test command)"
    if name in TEST_CONFIG_NAMES:
        return "test configuration"
    if name in STARTUP_HOOK_NAMES or name.endswith(STARTUP_HOOK_SUFFIXES):
        return "interpreter start-up hook"
    if policy.forbid_compiled_modules and name.endswith(COMPILED_MODULE_SUFFIXES):
        return "compiled extension module (imported before a .py of the same name)"
    if name.endswith(BYTECODE_SUFFIXES) or any(part in CACHE_DIRS for part in parts[:-1]) or name in CACHE_DIRS:
        return "bytecode, cache or version-control data"
    if policy.test_file_conventions and (_is_test_file(name) or any(part in TEST_DIRS for part in parts[:-1])):
        return "test file"
    if is_new and _shadows(parts, policy):
        return "new module shadowing the test machinery or the standard library"
    return ""


def is_tool_output(path: str) -> bool:
    """Whether `path` lies in what tools write on their own (dropped from the graded view, not
    tampering); see TOOL_OUTPUT_DIRS."""
    return any(part in TOOL_OUTPUT_DIRS or part.endswith(TOOL_OUTPUT_SUFFIXES)
               for part in posixpath.normpath(path).split("/")[:-1])


def classify(changed: Mapping[str, bool], symlinks: Iterable[str], task: Task) -> Dict[str, str]:
    """{path: reason} for every protected path among `changed` ({path: is_new}) and `symlinks`
    (tool output excepted: it is dropped, not flagged)."""
    policy = policy_for(task)
    links = set(symlinks)
    reasons = {}
    for path in sorted(set(changed) | links):
        if is_tool_output(path):
            continue
        reason = protection_reason(path, is_new=changed.get(path, True), is_symlink=path in links,
                                   task=task, policy=policy)
        if reason:
            reasons[path] = reason
    return reasons


# The largest source file the detectors parse: Python's syntax tree costs the host ~200 times the
# text in memory (a 2.4 MB file: 550 MB and 2 s to parse), and a fix under these policies is a
# one-line edit in a small module.
MAX_JUDGED_SOURCE_CHARS = 256 * 1024

# Names through which source code can reach the test runner's reports or end the process early.
_MACHINERY_REFERENCE = re.compile(
    r"\b(_?pytest|pluggy|conftest|unittest|sys\.modules|sys\.exit|_exit|SystemExit|argv|os\.kill|"
    r"settrace|setprofile|_getframe|meta_path|path_hooks|atexit|builtins|__builtins__|gc\.get_|"
    r"inspect\.(stack|currentframe)|importlib|__import__|faulthandler|signal|ctypes|subprocess|"
    r"os\.system|popen|eval|exec|compile|os\.write|os\.dup2?)\b")


def source_reason(path: str, old: str | None, new: str, task: Task, local_modules: Collection[str] = ()) -> str:
    """Why an allowed file's new content is tampering, or "". In every format: a .py file whose
    bytes Python decodes other than as UTF-8 (`encoding_reason`). Under policies that forbid it,
    an added line of Python that names the test machinery or the interpreter's internals, or added
    code that reaches them however it spells them (envs/grading/hack_detect.py: reflection, frames,
    names built at run time, objects equal to anything), judged on the text Python runs.
    `local_modules`: the workspace's own top-level modules, the only imports besides pure standard
    ones such a fix may add."""
    if not path.endswith(".py"):
        return ""
    policy = policy_for(task)
    reason = encoding_reason(old, new, policy)
    if reason or not policy.forbid_machinery_references:
        return reason
    if len(new) > MAX_JUDGED_SOURCE_CHARS:
        return f"source of {len(new)} characters, more than the detectors judge ({MAX_JUDGED_SOURCE_CHARS})"
    old, new = _as_python_runs(old), python_text(new)
    before = set((old or "").splitlines())
    for line in new.splitlines():
        if line not in before:
            match = _MACHINERY_REFERENCE.search(line)
            if match:
                return f"source names the test machinery ({match.group(0)!r})"
    reach = added_code_reason(old, new, local_modules)
    return f"added code reaches past its values: {reach}" if reach else ""


def _as_python_runs(old: str | None) -> str | None:
    """The pristine text as Python decodes it; as read, where Python would refuse it (the
    task's own file, not the agent's doing)."""
    try:
        return None if old is None else python_text(old)
    except (SyntaxError, UnicodeError):
        return old


def encoding_reason(old: str | None, new: str, policy: ProtectionPolicy) -> str:
    """Why the source encoding `new` declares is tampering, or "": every detector reads UTF-8,
    while Python honours a PEP 263 declaration (`# coding: utf-7` turns what reads as a comment
    into code). Where the policy keeps pristine encodings, the one `old` already declared stays."""
    try:
        declared = source_encoding(new)
    except SyntaxError as error:
        return f"declares a source encoding Python refuses (PEP 263): {str(error)[:200]}"
    if declared in UTF8_ENCODINGS:
        return ""
    if policy.keep_pristine_encodings and old is not None and _declared(old) == declared:
        return ""
    return f"declares source encoding {declared!r} (PEP 263): the detectors judge UTF-8"


def _declared(text: str) -> str | None:
    """The encoding `text` declares; None where Python refuses its declaration (a pristine file's
    invalid declaration is kept by nothing)."""
    try:
        return source_encoding(text)
    except SyntaxError:
        return None


def local_modules(paths: Iterable[str]) -> frozenset[str]:
    """Top-level module and package names of a workspace's files (`pkg/x.py` -> pkg, `mod.py` -> mod)."""
    names = set()
    for path in paths:
        top = path.split("/", 1)[0]
        if "/" in path or top.endswith(".py"):
            names.add(top[:-3] if top.endswith(".py") and "/" not in path else top)
    return frozenset(names)


def _is_test_file(name: str) -> bool:
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _shadows(parts: list[str], policy: ProtectionPolicy) -> bool:
    """A new module or package whose top-level name the test run imports from elsewhere."""
    for depth in range(len(parts) - 1, -1, -1):
        module = parts[depth]
        if depth == len(parts) - 1:
            if not module.endswith(".py"):
                continue
            module = module[:-3]
        if module in TEST_MACHINERY_MODULES:
            return True
        root = "/".join(parts[:depth])
        if root in policy.import_roots and module in _SHADOWABLE_STDLIB:
            return True
    return False
