"""Hidden cases run apart from the visible tests: their own command, their own copy of the view.

The visible tests tell the agent's code what they expect (their asserts, their frames); code that
recorded that during the test run and repaired itself from it would pass hidden cases run after it
in the same place. So the hidden cases run first, in a command of their own (a fresh process; the
local backend gives each command a fresh jail once a command left its /tmp dirty), over a copy of
the graded view without the task's test files, the test patch's targets or version-control data,
with HOME and TMPDIR inside that copy: nothing the visible run writes exists yet, and nothing the
tests expect is in reach. The copy is deleted when the runner ends.

The runner (envs/tasks/hidden_runner.py) prints nothing the grader reads but its results file,
carried back in a frame after it ended; the expected values never enter the sandbox
(envs/tasks/hidden_cases.py compares on the host).
"""
from __future__ import annotations

import base64
import binascii
import math
import re
import secrets
import shlex
from typing import Dict, Optional, Sequence

from envs.grading.reported_run import GRADING_MARK
from envs.sandboxes.sandbox import Sandbox
from envs.tasks.hidden_cases import RUNNER_SOURCE, compare, runner_input
from envs.tasks.task import Task

# Hidden cases' time limit: a share of the grading limit, at most this.
HIDDEN_TIMEOUT_S = 60.0
# What the runner writes for a handful of cases is small; more is not the runner's.
MAX_RESULTS_CHARS = 4 << 20


def hidden_timeout_s(grade_timeout_s: float) -> int:
    """Whole seconds, at least one: `timeout 0` would mean no limit at all."""
    return max(1, math.ceil(min(HIDDEN_TIMEOUT_S, grade_timeout_s / 4)))


def script(nonce: str, cases_json: str, hidden_paths: Sequence[str], timeout_s: int) -> str:
    mark = f"{GRADING_MARK}{nonce}"
    runner = base64.b64encode(RUNNER_SOURCE.encode()).decode()
    cases = base64.b64encode(cases_json.encode()).decode()
    # The paths go in a NUL-separated list, so no name the task has is ever parsed by the shell.
    hidden = base64.b64encode(b"".join(path.encode() + b"\0" for path in hidden_paths)).decode()
    return "\n".join([
        f"# {mark}",
        "d=$(mktemp -d /tmp/swerve-hidden.XXXXXXXX) || exit 97",
        f'printf %s {runner} | base64 -d > "$d/runner.py" || exit 97',
        f'printf %s {cases} | base64 -d > "$d/cases.json" || exit 97',
        'mkdir "$d/view" "$d/home" && cp -a . "$d/view/" 2>/dev/null; rm -rf "$d/view/.git"',
        f'printf %s {hidden} | base64 -d | (cd "$d/view" && xargs -0 -r rm -rf --)',
        f'(cd "$d/view" && HOME="$d/home" TMPDIR="$d/home" PYTHONNOUSERSITE=1 exec timeout -s KILL {timeout_s} '
        f'python3 -I "$d/runner.py" "$d/cases.json" "$d/results.json") </dev/null >/dev/null 2>&1',
        f"printf '\\n{mark} hidden\\n'",
        f'base64 -w0 "$d/results.json" 2>/dev/null; printf \'\\n{mark} end\\n\'',
        'chmod -R u+rwx "$d" 2>/dev/null; rm -rf -- "$d"',
        "exit 0",
    ])


def run_hidden_cases(sandbox: Sandbox, task: Task, hidden_paths: Sequence[str], grade_timeout_s: float) -> Dict[str, str]:
    """Label -> PASSED or FAILED (why) for each of the task's hidden cases, run as above."""
    nonce = secrets.token_hex(8)
    timeout_s = hidden_timeout_s(grade_timeout_s)
    result = sandbox.exec(script(nonce, runner_input(task.hidden_cases), hidden_paths, timeout_s),
                          timeout_s=timeout_s + 30.0)
    return compare(task.hidden_cases, _results(result.output, nonce))


def _results(output: str, nonce: str) -> Optional[str]:
    """The runner's results JSON text, None when the frame is missing, altered or unreadable (every
    case then fails: compare cannot vouch for any)."""
    mark = f"{GRADING_MARK}{nonce}"
    match = re.search(rf"\n{mark} hidden\n([A-Za-z0-9+/=]{{0,{MAX_RESULTS_CHARS}}})\n{mark} end\n\Z", output)
    if match is None or output.count(mark) != 2:
        return None
    try:
        return base64.b64decode(match.group(1), validate=True).decode() or None
    except (binascii.Error, UnicodeDecodeError):
        return None
