"""The grader's pytest plugin: each listed test's phases, sent once the session has finished.

The grading supervisor (envs/grading/grade_supervisor.py) copies this file into the sandbox under a
name of the grader's choosing and loads it with `-p`. The report leaves through a pipe the
supervisor opened before the tests started (SWERVE_REPORT_FD): no path names it, the plugin closes
it once written, and the supervisor is not dumpable, so nothing the tested code starts can reopen
it through /proc. Lines the tests print, a summary they fake, or a run that ends early (os._exit, a
crash, a kill) never become a report: the grader reads a missing or doubled report as a failure.

The listed node ids come in a file (SWERVE_REPORT_TESTS), never on the command line (a SWE-bench
row may list thousands, past what one argument holds): the plugin adds them to pytest's arguments
before the initial conftests load, as if they had been typed.

The report is one JSON object: {"exitstatus": N, "tests": {node id: [[when, outcome, xfail], ...]},
"raised": {node id: whether calling the test raised}, "other_reports": count of reports for tests
not listed, "integrity": [why the result machinery cannot be trusted, ...]}. "raised" is seen
around the test call itself, before any report object exists, so code that rewrites pytest's
reports leaves a report that contradicts it. "integrity" compares, at the session's end, the
functions that run and report a test with those this module saw when pytest imported it (before
any conftest or tested module), and names hook implementations and test functions whose code lives
in a file the agent changed (SWERVE_REPORT_CHANGED, one path per line).
Standard library and pytest's hooks only: it runs inside the graded process.
"""
import json
import os

import pytest

_LISTED = []
if os.environ.get("SWERVE_REPORT_TESTS"):
    with open(os.environ["SWERVE_REPORT_TESTS"], encoding="utf-8") as _handle:
        _LISTED = [line.rstrip("\n") for line in _handle if line.strip()]
_LISTED_SET = set(_LISTED)
_CHANGED = set()
if os.environ.get("SWERVE_REPORT_CHANGED"):
    with open(os.environ["SWERVE_REPORT_CHANGED"], encoding="utf-8") as _handle:
        _CHANGED = {os.path.realpath(line.rstrip("\n")) for line in _handle if line.strip()}
_FD = int(os.environ.get("SWERVE_REPORT_FD", "-1"))
if _FD >= 0:
    os.set_inheritable(_FD, False)  # a subprocess the tests start gets no copy of the channel
_PHASES = {}
_OTHER = [0]
_RAISED = {}
_TEST_CODE = {}

# (module, attribute path) of what runs a test and turns its outcome into a report. Names an older
# pytest lacks are skipped: what exists is compared.
_MACHINERY = (
    ("_pytest.runner", "runtestprotocol"), ("_pytest.runner", "call_and_report"),
    ("_pytest.runner", "call_runtest_hook"), ("_pytest.runner", "CallInfo.from_call"),
    ("_pytest.runner", "pytest_runtest_call"), ("_pytest.runner", "pytest_runtest_makereport"),
    ("_pytest.runner", "pytest_runtest_protocol"), ("_pytest.reports", "TestReport.from_item_and_call"),
    ("_pytest.reports", "TestReport.__init__"), ("_pytest.reports", "BaseReport.passed"),
    ("_pytest.reports", "BaseReport.failed"), ("_pytest.reports", "BaseReport.skipped"),
    ("_pytest.python", "pytest_pyfunc_call"), ("_pytest.python", "Function.runtest"),
    ("_pytest.main", "pytest_runtestloop"), ("_pytest.main", "Session.perform_collect"),
    ("_pytest.unittest", "TestCaseFunction.runtest"), ("pluggy._callers", "_multicall"),
    ("pluggy._hooks", "HookCaller.__call__"), ("pluggy._manager", "PluginManager._hookexec"),
    ("_pytest.outcomes", "fail"), ("_pytest.outcomes", "skip"), ("_pytest.outcomes", "xfail"),
)
# Hooks through which a plugin can alter what a test's run reports.
_RESULT_HOOKS = ("pytest_runtest_protocol", "pytest_runtest_call", "pytest_runtest_makereport",
                 "pytest_runtest_logreport", "pytest_pyfunc_call", "pytest_report_teststatus",
                 "pytest_runtestloop", "pytest_runtest_setup", "pytest_runtest_teardown",
                 "pytest_collection_modifyitems", "pytest_sessionfinish", "pytest_collectreport")


def _lookup(module_name, path):
    import importlib

    try:
        owner = importlib.import_module(module_name)
    except ImportError:
        return None
    for part in path.split("."):
        # The class's own __dict__ (a property or staticmethod stays itself), else inherited.
        found = vars(owner).get(part, None) if isinstance(owner, type) else getattr(owner, part, None)
        if found is None and isinstance(owner, type):
            found = getattr(owner, part, None)
        owner = found
        if owner is None:
            return None
    return owner


def _code(obj):
    """The code object behind a function, method, classmethod, staticmethod or property: replacing
    `__code__` keeps the function object and changes what it runs."""
    obj = getattr(obj, "fget", None) or getattr(obj, "__func__", None) or obj
    return getattr(obj, "__code__", None)


_SEEN = {(module, path): _lookup(module, path) for module, path in _MACHINERY}
_SEEN_CODE = {key: _code(obj) for key, obj in _SEEN.items()}


def _code_file(function):
    """The file the code of `function` (unwrapped, bound or not) was compiled from, or None."""
    seen = 0
    while hasattr(function, "__wrapped__") and seen < 50:
        function, seen = function.__wrapped__, seen + 1
    function = getattr(function, "__func__", function)
    code = getattr(function, "__code__", None)
    return getattr(code, "co_filename", None)


def _in_changed_file(function):
    filename = _code_file(function)
    return bool(filename) and os.path.realpath(filename) in _CHANGED


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    gate = int(os.environ.get("SWERVE_REPORT_GATE_FD", "-1"))
    if gate >= 0:
        # The supervisor opens the gate once the hidden cases ended: no conftest or test of the
        # task loads before (pytest's own start-up ran beside them).
        opened = os.read(gate, 2)
        os.close(gate)
        if opened != b"go":
            os._exit(3)
    args.extend(_LISTED)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if item.nodeid in _LISTED_SET:
        _TEST_CODE[item.nodeid] = getattr(item, "obj", None)
    outcome = yield
    if item.nodeid in _LISTED_SET:
        _RAISED[item.nodeid] = outcome.excinfo is not None


def pytest_runtest_logreport(report):
    if report.nodeid in _LISTED_SET:
        _PHASES.setdefault(report.nodeid, []).append([report.when, report.outcome, hasattr(report, "wasxfail")])
    else:
        _OTHER[0] += 1


def pytest_collectreport(report):
    # A listed test whose module fails to import is never run: its collection error is its status.
    if report.failed:
        for node_id in _LISTED:
            if node_id.split("::", 1)[0] == report.nodeid:
                _PHASES.setdefault(node_id, []).append(["collect", "failed", False])


def _integrity(session):
    found = []
    for (module, path), original in _SEEN.items():
        if original is None:
            continue
        now = _lookup(module, path)
        if now is not original or _code(now) is not _SEEN_CODE[(module, path)]:
            found.append(f"{module}.{path} was replaced during the run")
    manager = session.config.pluginmanager
    multicall = _SEEN[("pluggy._callers", "_multicall")]
    if multicall is not None and getattr(manager, "_inner_hookexec", multicall) is not multicall:
        found.append("the plugin manager's hook caller was replaced during the run")
    for name in _RESULT_HOOKS:
        caller = getattr(manager.hook, name, None)
        for impl in (caller.get_hookimpls() if caller is not None else []):
            if _in_changed_file(impl.function):
                found.append(f"hook {name} implemented in a changed file ({_code_file(impl.function)})")
    for node_id, function in sorted(_TEST_CODE.items()):
        if function is not None and _in_changed_file(function):
            found.append(f"test {node_id} ran code from a changed file ({_code_file(function)})")
    return found


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if _FD < 0:
        return
    report = {"exitstatus": int(exitstatus), "tests": _PHASES, "raised": _RAISED, "other_reports": _OTHER[0],
              "integrity": _integrity(session)}
    data = json.dumps(report).encode("utf-8")
    written = 0
    try:
        while written < len(data):
            written += os.write(_FD, data[written:])
    finally:
        os.close(_FD)
