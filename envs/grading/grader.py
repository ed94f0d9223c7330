"""SWE-bench's grading rule, read through a channel the tested code does not write.

Resolved iff every FAIL_TO_PASS and PASS_TO_PASS test passed, the run exited 0 and every hidden
case (Task.hidden_cases) returned its expected value. For a pytest test command each listed test's
status comes from the grader's own plugin (envs/grading/grade_report.py), written once the session
finished, and is cross-checked against the run's exit code; the tested process's output is only
shown, never parsed. So printing "PASSED <id>" lines, faking a summary or exiting 0 early cannot
pass: a report that is missing, duplicated, for other tests, or that contradicts the exit code
is a failure. A test command that is not a plain pytest call is
graded by its exit code and the `-rA` summary as before.
"""
from __future__ import annotations

import base64
import binascii
import json
import math
import re
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from envs.tasks.hidden_cases import PASSED as CASE_PASSED
from envs.tasks.hidden_cases import RUNNER_SOURCE, compare, runner_input
from envs.outcomes import InfraError, InfraSource, WorkspaceError
from envs.tasks.pytest_summary import MISSING, PASSED, parse_test_status
from envs.sandboxes.sandbox import Sandbox
from envs.tasks.task import Task


@dataclass
class GradeResult:
    resolved: bool
    # Node id -> PASSED | FAILED | ERROR | SKIPPED | XFAIL | XPASS | MISSING, for every listed test.
    test_status: Dict[str, str]
    exit_code: int
    output: str
    # Hidden case label -> PASSED or "FAILED (why)"; empty for a task without hidden cases.
    hidden_status: Dict[str, str] = field(default_factory=dict)
    # Why the report could not be trusted (missing, duplicated, contradicting the exit code), or
    # why a Harbor verifier's reward is 0 without its saying so.
    problems: List[str] = field(default_factory=list)
    # A Harbor verifier's reward (fractional rewards kept; resolved iff >= 1); None: 1 iff resolved.
    reward: Optional[float] = None

    @property
    def score(self) -> float:
        if self.reward is not None:
            return self.reward
        return 1.0 if self.resolved else 0.0


TEST_PATCH_FILE = ".swerve-test.patch"
REPORT_PLUGIN_SOURCE = (Path(__file__).resolve().parent / "grade_report.py").read_text()
# Output of the test run shown back (the agent's report, eval tables); the verdict never reads it.
SHOWN_OUTPUT_BYTES = 32768
# Hidden cases run after the tests, each run's share of the grading limit at most this.
HIDDEN_TIMEOUT_S = 60.0
_SHELL_OPERATORS = re.compile(r"[;&|<>`$()]")
# Begins every line of the grader's frame (with a nonce); a command holding it is a grading run.
GRADING_MARK = "SWERVE-GRADE-"


def patched_files(diff: str) -> list[str]:
    """Paths a unified diff writes (its `+++ b/...` lines), in order, without duplicates."""
    files = []
    for line in diff.splitlines():
        if line.startswith("+++ ") and not line.startswith("+++ /dev/null"):
            path = line[4:].split("\t", 1)[0].strip()
            files.append(path[2:] if path.startswith("b/") else path)
    return list(dict.fromkeys(files))


def grader_written_paths(task: Task) -> list[str]:
    """Workspace paths grading writes over whatever the agent left: test files and test_patch targets."""
    return list(dict.fromkeys([path for path, _ in task.test_files] + patched_files(task.test_patch)))


def reports_per_test(command: str) -> bool:
    """Whether the test command is one plain pytest call, so the grader's plugin can report."""
    words = command.split()
    return "pytest" in words[:4] and not _SHELL_OPERATORS.search(command)


def _apply_test_patch(sandbox: Sandbox, task: Task, timeout_s: float) -> None:
    """SWE-bench's order: test files back to the repository's HEAD (or removed when new), then
    test_patch. It does not apply: WorkspaceError (the caller tells the agent's doing from a
    broken task by trying the pristine workspace)."""
    restore = "; ".join(
        f"git checkout -q HEAD -- {shlex.quote(f)} 2>/dev/null || rm -rf -- {shlex.quote(f)}"
        for f in patched_files(task.test_patch)
    )
    sandbox.write_files({TEST_PATCH_FILE: task.test_patch})
    result = sandbox.exec(f"{restore}; git apply {TEST_PATCH_FILE}; status=$?; rm -f {TEST_PATCH_FILE}; exit $status",
                          timeout_s=timeout_s)
    if result.exit_code != 0:
        raise WorkspaceError(f"test_patch of {task.id} does not apply: {result.output[-1000:]}")


def grade(sandbox: Sandbox, task: Task, timeout_s: float) -> GradeResult:
    tests = list(dict.fromkeys(task.fail_to_pass + task.pass_to_pass))
    try:
        sandbox.write_files(dict(task.test_files))
        if task.test_patch:
            _apply_test_patch(sandbox, task, timeout_s)
        if reports_per_test(task.test_command):
            return _grade_reported(sandbox, task, tests, timeout_s)
        result = sandbox.exec(" ".join([task.test_command, *(shlex.quote(node_id) for node_id in tests)]),
                              timeout_s=timeout_s)
    except InfraError as error:
        raise InfraError(InfraSource.GRADER, f"grading {task.id}: {error}") from error
    # A test run that times out is the agent's doing (e.g. an edit that loops forever), as in
    # SWE-bench: it scores unresolved rather than being excluded as an infra error.
    status = parse_test_status(result.output, tests)
    resolved = result.exit_code == 0 and all(status[node_id] == PASSED for node_id in tests)
    return GradeResult(resolved=resolved, test_status=status, exit_code=result.exit_code, output=result.output)


def _grade_reported(sandbox: Sandbox, task: Task, tests: list[str], timeout_s: float) -> GradeResult:
    nonce = secrets.token_hex(8)
    files = {f"swerve_report_{nonce}.py": REPORT_PLUGIN_SOURCE, "tests.txt": "".join(f"{t}\n" for t in tests)}
    if task.hidden_cases:
        files.update({"hidden_runner.py": RUNNER_SOURCE, "cases.json": runner_input(task.hidden_cases)})
    # Whole seconds, at least one: `timeout 0` would mean no limit at all.
    hidden_s = max(1, math.ceil(min(HIDDEN_TIMEOUT_S, timeout_s / 4)))
    result = sandbox.exec(_script(task.test_command, tests, nonce, files, hidden_s), timeout_s=timeout_s + hidden_s)
    report, hidden_json, output, problems = _read_frame(result.output, nonce)
    if result.timed_out:
        problems.append(f"the test run timed out after {timeout_s:.0f} s")
    elif result.exit_code != 0:
        problems.append(f"the grading script exited {result.exit_code}")
    status, exit_code = _statuses(report, tests, problems)
    hidden = compare(task.hidden_cases, hidden_json) if task.hidden_cases else {}
    resolved = (not problems and exit_code == 0 and all(status[t] == PASSED for t in tests)
                and all(s == CASE_PASSED for s in hidden.values()))
    shown = output + "".join(f"\ngrading: {problem}" for problem in problems)
    return GradeResult(resolved=resolved, test_status=status, exit_code=exit_code, output=shown,
                       hidden_status=hidden, problems=problems)


def _script(command: str, tests: list[str], nonce: str, files: Dict[str, str], hidden_s: int) -> str:
    """One bash script: the grader's files are written by the command's own user into a fresh
    folder outside the workspace (a container backend writes files as another user), the tests
    run with the plugin, then the hidden cases; the frame is printed last, after every process
    the tests started in the foreground ended."""
    mark = f"{GRADING_MARK}{nonce}"
    ids = " ".join(shlex.quote(t) for t in tests)
    writes = [f"printf %s {base64.b64encode(content.encode()).decode()} | base64 -d > \"$d/{name}\" || exit 97"
              for name, content in files.items()]
    return "\n".join([
        "d=$(mktemp -d /tmp/swerve-grade.XXXXXXXX) || exit 97",
        *writes,
        f'(export PYTHONPATH="$d${{PYTHONPATH:+:$PYTHONPATH}}" SWERVE_REPORT_PATH="$d/report.json" '
        f'SWERVE_REPORT_TESTS="$d/tests.txt"; exec {command} -p swerve_report_{nonce} {ids}) </dev/null >"$d/out.log" 2>&1',
        "code=$?",
        f'if [ -f "$d/cases.json" ]; then timeout -s KILL {hidden_s} python -I "$d/hidden_runner.py" '
        f'"$d/cases.json" "$d/hidden.json" </dev/null >/dev/null 2>&1; fi',
        f'tail -c {SHOWN_OUTPUT_BYTES} "$d/out.log"',
        f"printf '\\n{mark} %s\\n' \"$code\"",
        f'base64 -w0 "$d/report.json" 2>/dev/null; printf \'\\n{mark} hidden\\n\'',
        f'base64 -w0 "$d/hidden.json" 2>/dev/null; printf \'\\n{mark} end\\n\'',
        'rm -rf -- "$d"',
        "exit 0",
    ])


def _read_frame(output: str, nonce: str) -> tuple[Optional[dict], Optional[str], str, List[str]]:
    """(report, hidden results JSON, the shown test output, problems) from the script's output.
    The frame must be the output's end and appear once: a process that wrote a second one, or
    wrote after it, leaves a frame the grader does not trust."""
    mark = f"{GRADING_MARK}{nonce}"
    match = re.search(rf"\n{mark} (-?\d+)\n([A-Za-z0-9+/=]*)\n{mark} hidden\n([A-Za-z0-9+/=]*)\n{mark} end\n\Z",
                      output)
    if match is None or output.count(mark) != 3:
        return None, None, output[-SHOWN_OUTPUT_BYTES:], ["the grader's report frame is missing or altered"]
    problems: List[str] = []
    try:
        report = json.loads(base64.b64decode(match.group(2), validate=True)) if match.group(2) else None
        hidden = base64.b64decode(match.group(3), validate=True).decode() if match.group(3) else None
    except (binascii.Error, UnicodeDecodeError, json.JSONDecodeError) as error:
        return None, None, output[:match.start()], [f"the report is unreadable: {error}"]
    if not isinstance(report, dict) or not isinstance(report.get("tests"), dict):
        problems.append("the test run wrote no report (it ended before pytest finished its session)")
        report = None
    elif report.get("exitstatus") != int(match.group(1)):
        problems.append(f"the report's exit status {report.get('exitstatus')} contradicts the run's "
                        f"exit code {match.group(1)}")
    if report is not None:
        report["exit_code"] = int(match.group(1))
    return report, hidden, output[:match.start()], problems


_PHASE_FAILURE = {"setup": "ERROR", "teardown": "ERROR", "collect": "ERROR", "call": "FAILED"}


def _statuses(report: Optional[dict], tests: list[str], problems: List[str]) -> tuple[Dict[str, str], int]:
    """Each listed test's status from the plugin's phases, and the run's exit code (-1 without a
    report). A test whose phases repeat or are missing is a problem, and never PASSED."""
    if report is None:
        return {t: MISSING for t in tests}, -1
    status = {}
    for test in tests:
        phases = report["tests"].get(test) or []
        whens = [phase[0] for phase in phases]
        if len(whens) != len(set(whens)):
            problems.append(f"{test}: phases reported twice {whens}")
        status[test] = _status_of(phases)
        if status[test] == PASSED and report.get("raised", {}).get(test, True):
            problems.append(f"{test}: reported passed, but its call raised (or was never seen)")
    return status, report["exit_code"]


def _status_of(phases: list) -> str:
    by_when = {phase[0]: (phase[1], phase[2]) for phase in phases if isinstance(phase, list) and len(phase) == 3}
    if not by_when:
        return MISSING
    for when in ("collect", "setup", "call", "teardown"):
        outcome, xfail = by_when.get(when, ("passed", False))
        if outcome == "skipped":
            return "XFAIL" if xfail else "SKIPPED"
        if outcome == "failed":
            return _PHASE_FAILURE[when]
    if set(by_when) != {"setup", "call", "teardown"}:
        return MISSING
    return "XPASS" if by_when["call"][1] else PASSED
