"""A pytest test command run under the grading supervisor, and its verdict read back (host side).

The sandbox side is envs/grading/grade_supervisor.py (the process that runs pytest and carries the
report out through a pipe) and envs/grading/grade_report.py (the plugin in the tested process). What
reaches the host is untrusted text: the frame must end the output and appear once, its payload is
bounded before it is decompressed and parsed, and every report is checked for shape, for phases
that repeat or contradict the run's exit code, and for the plugin's integrity findings. Each
finding is a problem: the attempt is unresolved, with the reason, never an exception.
"""
from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
import shlex
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from envs.grading.hidden_run import start_lines
from envs.tasks.hostile_json import HostileJSONError, load_bounded
from envs.sandboxes.sandbox import ExecResult, Sandbox
from envs.tasks.pytest_summary import MISSING, PASSED

_HERE = Path(__file__).resolve().parent
PLUGIN_SOURCE = (_HERE / "grade_report.py").read_text()
SUPERVISOR_SOURCE = (_HERE / "grade_supervisor.py").read_text()
# What the grader hands the supervisor (the node ids, the changed paths): a file in the workspace,
# since thousands of ids fit no command line (one argument holds at most 128 KiB).
INPUT_FILE = ".swerve-grade-input.json"
# Ends the supervisor's source in the command (a here-document; the source never holds this line).
SOURCE_END = "SWERVE_SUPERVISOR_SOURCE_END"
# Begins every line of the grader's frames (with a nonce); a command holding it is a grading run.
GRADING_MARK = "SWERVE-GRADE-"
# Output of the test run shown back (the agent's report, eval tables); the verdict never reads it.
SHOWN_OUTPUT_BYTES = 32768
# Bounds on what the host decodes from the frame: compressed, then inflated.
MAX_PAYLOAD_CHARS = 8 << 20
MAX_INFLATED_BYTES = 64 << 20
MAX_REPORT_DEPTH = 8
_PHASE_FAILURE = {"setup": "ERROR", "teardown": "ERROR", "collect": "ERROR", "call": "FAILED"}


@dataclass
class RunVerdict:
    status: Dict[str, str]
    exit_code: int
    output: str
    problems: List[str] = field(default_factory=list)
    # The hidden runner's results JSON text (None: not run, or nothing came back).
    hidden_results: Optional[str] = None


def input_file(tests: Sequence[str], changed: Sequence[str], command: str, per_test: bool, timeout_s: float,
               hidden: Optional[dict] = None) -> tuple:
    """(nonce, the input file's text) for one supervised run (envs/grading/grade_supervisor.py)."""
    nonce = secrets.token_hex(8)
    limits = {"timeout_s": hidden["timeout_s"], "max_bytes": hidden["max_bytes"]} if hidden else None
    return nonce, json.dumps({"plugin_source": PLUGIN_SOURCE, "command": command, "plugin": f"swerve_report_{nonce}",
                              "tests": list(tests), "changed_paths": list(changed), "per_test": per_test,
                              "timeout_s": timeout_s, "shown_bytes": SHOWN_OUTPUT_BYTES,
                              "mark": f"{GRADING_MARK}{nonce}", "hidden": limits})


def script(nonce: str, hidden: Optional[dict] = None) -> str:
    """The grading command: with hidden cases, their runner started in the background over its copy
    of the view (envs/grading/hidden_run.py); then the supervisor's source handed to the sandbox's
    python on stdin (no file of it anywhere), the input file's path (and the runner's folder and
    pid) its arguments."""
    head = f"# {GRADING_MARK}{nonce}\n"
    supervisor = f"<<'{SOURCE_END}'\n{SUPERVISOR_SOURCE}{SOURCE_END}\n"
    if hidden is None:
        return f"{head}exec python3 -I -S - {shlex.quote(INPUT_FILE)} {supervisor}"
    lines = ["d=$(mktemp -d /tmp/swerve-grade.XXXXXXXX) || exit 97", *start_lines(hidden)]
    return head + "\n".join(lines) + f'\nexec python3 -I -S - {shlex.quote(INPUT_FILE)} "$d" "$!" {supervisor}'


def run(sandbox: Sandbox, tests: Sequence[str], changed: Sequence[str], command: str, per_test: bool,
        timeout_s: float, hidden: Optional[dict] = None) -> RunVerdict:
    """The listed tests run under the supervisor (after the hidden cases, when given: see
    envs/grading/hidden_run.py), and what it vouches for."""
    nonce, text = input_file(tests, changed, command, per_test, timeout_s, hidden)
    sandbox.write_files({INPUT_FILE: text})
    # The supervisor ends the tests at timeout_s (the hidden cases at theirs); the slack covers
    # its start and the report's way out.
    limit_s = timeout_s + (hidden["timeout_s"] if hidden else 0) + 30.0
    result = sandbox.exec(script(nonce, hidden), timeout_s=limit_s)
    return read(result, nonce, list(tests))


def read(result: ExecResult, nonce: str, tests: List[str]) -> RunVerdict:
    runs, hidden, output, problems = _frame(result.output, nonce)
    if result.timed_out:
        problems.append(f"the grading command timed out after {result.timeout_s:.0f} s")
    status = {test: MISSING for test in tests}
    codes = [_judge(one, status, problems) for one in runs]
    exit_code = next((code for code in codes if code != 0), 0) if codes else -1
    return RunVerdict(status=status, exit_code=exit_code, output=output, problems=problems, hidden_results=hidden)


def _frame(output: str, nonce: str) -> tuple[list, Optional[str], str, List[str]]:
    """(runs, the hidden results text, the shown output, problems). The frame must be the output's
    end and appear once: a process that wrote a second one, or wrote after it, leaves a frame the
    grader does not trust."""
    mark = f"{GRADING_MARK}{nonce}"
    match = re.search(rf"\n{mark} result\n([A-Za-z0-9+/=]{{0,{MAX_PAYLOAD_CHARS}}})\n{mark} end\n\Z", output)
    if match is None or output.count(mark) != 2:
        return [], None, output[-SHOWN_OUTPUT_BYTES:], ["the grader's report frame is missing or altered"]
    shown = output[:match.start()]
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(base64.b64decode(match.group(1), validate=True), MAX_INFLATED_BYTES)
        if inflater.unconsumed_tail:
            raise ValueError(f"it inflates past {MAX_INFLATED_BYTES} bytes")
        frame = load_bounded(raw, MAX_INFLATED_BYTES, MAX_REPORT_DEPTH)
        runs, hidden = frame["runs"], frame.get("hidden")
        if not isinstance(runs, list) or not all(isinstance(one, dict) for one in runs):
            raise ValueError("its runs are not a list of objects")
    except (binascii.Error, zlib.error, ValueError, KeyError, TypeError) as error:  # HostileJSONError too
        return [], None, shown, [f"the supervisor's frame is unreadable: {error}"]
    return runs, hidden if isinstance(hidden, str) else None, shown, []


def _judge(one: dict, status: Dict[str, str], problems: List[str]) -> int:
    """Record the statuses one supervised pytest run vouches for; its exit code (-1 untrusted)."""
    tests = [test for test in one.get("tests", []) if isinstance(test, str) and test in status]
    code = one.get("exit_code")
    if type(code) is not int:
        problems.append("a run's exit code is missing")
        return -1
    label = tests[0] if len(tests) == 1 else "the test run"
    if one.get("timed_out"):
        problems.append(f"{label}: timed out")
        return 124
    if one.get("channel"):
        problems.append(f"{label}: {one['channel']}")
        return code if code != 0 else -1
    report = _report(one.get("report"), label, problems)
    if report is None:
        return code if code != 0 else -1
    if report.get("exitstatus") != code:
        problems.append(f"{label}: the report's exit status {report.get('exitstatus')} contradicts the exit code {code}")
    for finding in report.get("integrity") or []:
        problems.append(f"{label}: pytest's machinery was altered: {str(finding)[:300]}")
    phases_of = report["tests"]
    for test in tests:
        phases = _phases(phases_of.get(test))
        whens = [phase[0] for phase in phases]
        if len(whens) != len(set(whens)):
            problems.append(f"{test}: phases reported twice {whens}")
        status[test] = _status_of(phases)
        if status[test] == PASSED and report.get("raised", {}).get(test, True) is not False:
            problems.append(f"{test}: reported passed, but its call raised (or was never seen)")
    return code


def _report(text, label: str, problems: List[str]) -> Optional[dict]:
    if not isinstance(text, str) or not text:
        problems.append(f"{label}: the test run sent no report (it ended before pytest finished its session)")
        return None
    try:
        report = load_bounded(text, MAX_INFLATED_BYTES, MAX_REPORT_DEPTH)
    except HostileJSONError as error:
        problems.append(f"{label}: the report is unreadable: {error}")
        return None
    if (not isinstance(report, dict) or not isinstance(report.get("tests"), dict)
            or not isinstance(report.get("raised", {}), dict) or not isinstance(report.get("integrity", []), list)):
        problems.append(f"{label}: the report is not the plugin's shape")
        return None
    return report


def _phases(value) -> list:
    """The well-formed [when, outcome, xfail] entries of a test's phases (others are dropped, so
    a test with none is MISSING)."""
    if not isinstance(value, list):
        return []
    return [phase for phase in value if isinstance(phase, list) and len(phase) == 3 and isinstance(phase[0], str)
            and isinstance(phase[1], str) and isinstance(phase[2], bool)]


def _status_of(phases: list) -> str:
    by_when = {phase[0]: (phase[1], phase[2]) for phase in phases}
    if not by_when:
        return MISSING
    for when in ("collect", "setup", "call", "teardown"):
        outcome, xfail = by_when.get(when, ("passed", False))
        if outcome == "skipped":
            return "XFAIL" if xfail else "SKIPPED"
        if outcome == "failed":
            return _PHASE_FAILURE.get(when, "ERROR")
    if set(by_when) != {"setup", "call", "teardown"}:
        return MISSING
    return "XPASS" if by_when["call"][1] else PASSED
