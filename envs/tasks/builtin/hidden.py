"""Run hidden cases on a repository on this host, with the sandbox's own runner.

One runner for the built-in suite's expected values (suite.py, on the correct repository), its
self-check (check.py, on the buggy workspace too) and grading (envs/grading/grader.py, in the sandbox):
envs/tasks/hidden_runner.py, given the same CASES file (envs/hidden_cases.runner_input), so an
expected value is what the grader's run gives on the correct code. Outcomes are the runner's
entries: {"value": canonical JSON text}, plus "raised": "module.qualname" for an exception, or
{"error": why}; comparing two outcomes is comparing two dicts of strings.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from envs.tasks.hidden_cases import RUNNER_SOURCE, runner_input
from envs.tasks.task import HiddenCase

RUNNER_PATH = Path(__file__).resolve().parent.parent / "hidden_runner.py"
Outcome = Dict[str, str]

# Part of the expected values' cache key: a change in how results are computed or encoded must
# not reuse values computed the old way.
RUNNER_DIGEST = hashlib.sha256(RUNNER_SOURCE.encode()).hexdigest()[:8]


def parse_call(text: str) -> Tuple[str, str]:
    """"pkg.mod:function" or "pkg.mod:Class.method" -> ("pkg.mod", "function")."""
    module, sep, function = text.partition(":")
    if not sep or not module or not all(part.isidentifier() for part in function.split(".")):
        raise ValueError(f"hidden call {text!r}: expected '<dotted.module>:<function>' or '<dotted.module>:<Class>.<method>'")
    return module, function


def run_calls(repo_dir: Path, cases: Sequence[HiddenCase], timeout_s: float = 60.0) -> List[Outcome]:
    """Each case's outcome, in order (its expected value unused), from one `python -I -B` child
    with cwd the repository (isolated: no PYTHONPATH, user site or caller's cwd leaks in; -B: no
    __pycache__ written into the repository). The CASES and RESULTS files live outside it."""
    with tempfile.TemporaryDirectory(prefix="swerve-hidden-") as tmp:
        cases_path, results_path = Path(tmp) / "cases.json", Path(tmp) / "results.json"
        cases_path.write_text(runner_input(cases))
        result = subprocess.run(
            [sys.executable, "-I", "-B", str(RUNNER_PATH), str(cases_path), str(results_path)],
            cwd=repo_dir, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s,
        )
        if result.returncode != 0 or not results_path.is_file():
            raise RuntimeError(f"hidden-case runner failed in {repo_dir} (exit {result.returncode}):\n{result.stderr}")
        outcomes = json.loads(results_path.read_text())
    if len(outcomes) != len(cases):
        raise RuntimeError(f"hidden-case runner in {repo_dir}: {len(outcomes)} outcomes for {len(cases)} cases")
    return outcomes
