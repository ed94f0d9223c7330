"""Run a task's hidden calls (`module.function(*args)`) on a repository in a fresh interpreter.

One runner for the built-in suite's expected values (suite.py, on the correct repository) and
its self-check (check.py, on the buggy workspace too). Results travel as canonical JSON texts
(sort_keys), so comparing two results is comparing two strings: `true` and `1` stay distinct,
and floats are compared exactly after a JSON round trip (repr round-trips a float).
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

# (module, function, args): what one hidden call names.
Call = Tuple[str, str, list]
# {"result": canonical JSON text} or {"error": "why the call gave no plain value"}.
Outcome = Dict[str, str]

# Runs in the child. Exact types (not isinstance): a bool is an int, and a tuple or a subclass of
# list would be turned into a plain list by json.dumps, hiding what the function really returns.
# An exception is an outcome to compare, not a crash: on a buggy workspace it is the bug showing.
_SCRIPT = r"""
import importlib, json, math, sys

def plain(value):
    kind = type(value)
    if kind is list:
        return all(plain(item) for item in value)
    if kind is dict:
        return all(type(key) is str and plain(item) for key, item in value.items())
    if kind is float:
        return math.isfinite(value)
    return kind in (int, str, bool, type(None))

def run(module, function, args):
    try:
        value = getattr(importlib.import_module(module), function)(*args)
    except Exception as error:
        return {"error": f"raised {type(error).__name__}: {error}"}
    if not plain(value):
        return {"error": f"returned a value that is not plain JSON: {type(value).__name__} {value!r:.200}"}
    return {"result": json.dumps(value, sort_keys=True)}

answer = sys.stdout
sys.stdout = sys.stderr  # a call that prints must not corrupt the answer
sys.path.insert(0, sys.argv[1])
json.dump([run(*call) for call in json.load(sys.stdin)], answer)
"""

# Part of the expected values' cache key: a change in how results are computed or encoded must
# not reuse values computed the old way.
RUNNER_DIGEST = hashlib.sha256(_SCRIPT.encode()).hexdigest()[:8]


def parse_call(text: str) -> Tuple[str, str]:
    """"pkg.mod:function" -> ("pkg.mod", "function")."""
    module, sep, function = text.partition(":")
    if not sep or not module or not function.isidentifier():
        raise ValueError(f"hidden call {text!r}: expected '<dotted.module>:<function>'")
    return module, function


def run_calls(repo_dir: Path, calls: Sequence[Call], timeout_s: float = 60.0) -> List[Outcome]:
    """Each call's outcome, in order, from one `python -I -B` child with cwd and sys.path[0] the
    repository (isolated: no PYTHONPATH, user site or caller's cwd leaks in; -B: no __pycache__
    written into the repository)."""
    result = subprocess.run(
        [sys.executable, "-I", "-B", "-c", _SCRIPT, str(repo_dir)],
        input=json.dumps([list(call) for call in calls]),
        cwd=repo_dir, capture_output=True, text=True, timeout=timeout_s,
    )
    if result.returncode != 0:
        raise RuntimeError(f"hidden-call runner failed in {repo_dir} (exit {result.returncode}):\n{result.stderr}")
    outcomes = json.loads(result.stdout)
    if len(outcomes) != len(calls):
        raise RuntimeError(f"hidden-call runner in {repo_dir}: {len(outcomes)} outcomes for {len(calls)} calls")
    return outcomes
