"""The grader's pytest plugin: each listed test's phases, written once the session has finished.

The grader (envs/grading/grader.py) copies this file into the sandbox under a name of its own choosing
and loads it with `-p`, so the graded run reports through a channel the tested code does not
write: lines it prints or a summary it fakes never reach the verdict, and a run that exits early
(os._exit, a crash, a kill) leaves no report at all, which the grader reads as a failure.

Environment: SWERVE_REPORT_PATH (where to write), SWERVE_REPORT_TESTS (a file with the listed
node ids, one per line). The report is one JSON object: {"exitstatus": N, "tests": {node id:
[[when, outcome, xfail], ...]}, "raised": {node id: whether calling the test raised},
"other_reports": count of reports for tests not listed}. "raised" is seen around the test call
itself, before any report object exists, so code that rewrites pytest's reports (an agent's
change imported by the tests) leaves a report that contradicts it.
Standard library and pytest's hooks only: it runs inside the graded process.
"""
import json
import os

import pytest

_PATH = os.environ.get("SWERVE_REPORT_PATH", "")
_LISTED = set()
if os.environ.get("SWERVE_REPORT_TESTS"):
    with open(os.environ["SWERVE_REPORT_TESTS"], encoding="utf-8") as _handle:
        _LISTED = {line.rstrip("\n") for line in _handle if line.strip()}
_PHASES = {}
_OTHER = [0]
_RAISED = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    outcome = yield
    if item.nodeid in _LISTED:
        _RAISED[item.nodeid] = outcome.excinfo is not None


def pytest_runtest_logreport(report):
    if report.nodeid in _LISTED:
        _PHASES.setdefault(report.nodeid, []).append([report.when, report.outcome, hasattr(report, "wasxfail")])
    else:
        _OTHER[0] += 1


def pytest_collectreport(report):
    # A listed test whose module fails to import is never run: its collection error is its status.
    if report.failed:
        for node_id in _LISTED:
            if node_id.split("::", 1)[0] == report.nodeid:
                _PHASES.setdefault(node_id, []).append(["collect", "failed", False])


def pytest_sessionfinish(session, exitstatus):
    if not _PATH:
        return
    with open(_PATH, "w", encoding="utf-8") as handle:
        json.dump({"exitstatus": int(exitstatus), "tests": _PHASES, "raised": _RAISED, "other_reports": _OTHER[0]},
                  handle)
