"""Hidden cases run apart from the visible tests (host side): what the grading supervisor is told.

The visible tests tell the agent's code what they expect (their asserts, their frames); code that
recorded that during the test run and repaired itself from it would pass hidden cases run after it
in the same place. So the supervisor (envs/grading/grade_supervisor.py) runs the hidden cases first,
before any test, in a process of their own over a copy of the graded view without the task's test
files, the test patch's targets or version-control data, with HOME and TMPDIR inside a folder of
their own: nothing the visible run writes exists yet, and nothing the tests expect is in reach.
Where the tests arrive with the row's test_patch (SWE-bench's shape), the grader runs them in a
supervised command of their own before the patch is applied, so the tests exist nowhere in the
sandbox yet (envs/grading/grader.py). The
runner (envs/tasks/hidden_runner.py) returns plain values; the expected values never enter the
sandbox (envs/tasks/hidden_cases.py compares on the host).
"""
from __future__ import annotations

import base64
import math
from typing import Sequence

from envs.tasks.hidden_cases import RUNNER_SOURCE, runner_input
from envs.tasks.task import Task

# Hidden cases' time limit: a share of the grading limit, at most this.
HIDDEN_TIMEOUT_S = 60.0
# What the runner writes for a handful of cases is small; more is not the runner's.
MAX_RESULTS_BYTES = 4 << 20
__all__ = ["HIDDEN_TIMEOUT_S", "hidden_spec", "hidden_timeout_s", "start_lines"]


def hidden_timeout_s(grade_timeout_s: float) -> int:
    """Whole seconds, at least one."""
    return max(1, math.ceil(min(HIDDEN_TIMEOUT_S, grade_timeout_s / 4)))


def hidden_spec(task: Task, exclude: Sequence[str], grade_timeout_s: float) -> dict:
    """What grading needs to run the hidden cases: the calls (no expected value), the workspace
    paths the copy of the view leaves out, the limits."""
    return {"cases_json": runner_input(task.hidden_cases), "exclude": list(exclude),
            "timeout_s": hidden_timeout_s(grade_timeout_s), "max_bytes": MAX_RESULTS_BYTES}


def start_lines(spec: dict) -> list[str]:
    """Bash lines that copy the view into "$d/view" (without .git and `exclude`), write the runner
    and the calls, and start the runner in a process group of its own in the background (its pid in $!),
    HOME and TMPDIR in "$d/home". The paths go as a NUL-separated list: no name is parsed by the
    shell."""
    runner = base64.b64encode(RUNNER_SOURCE.encode()).decode()
    cases = base64.b64encode(spec["cases_json"].encode()).decode()
    exclude = base64.b64encode(b"".join(path.encode() + b"\0" for path in spec["exclude"])).decode()
    return [
        'mkdir "$d/view" "$d/home" || exit 97',
        'cp -a . "$d/view/" 2>/dev/null; rm -rf "$d/view/.git" "$d/view/.hg"',
        f'printf %s {exclude} | base64 -d | (cd "$d/view" && xargs -0 -r rm -rf --)',
        f'printf %s {runner} | base64 -d > "$d/runner.py" || exit 97',
        f'printf %s {cases} | base64 -d > "$d/cases.json" || exit 97',
        # Job control on: the background runner leads a process group of its own (its pid), so
        # the supervisor can end it and whatever it leaves running.
        "set -m",
        '(cd "$d/view" && HOME="$d/home" TMPDIR="$d/home" PYTHONNOUSERSITE=1 exec python3 -I "$d/runner.py" '
        '"$d/cases.json" "$d/results.json") </dev/null >/dev/null 2>&1 &',
    ]
