"""The verdict's channel (envs/grading/reported_run.py, grade_supervisor.py, grade_report.py): a pipe the
tested process cannot name, pytest's machinery checked intact, ids of any number, per-test runs."""
import dataclasses
import subprocess

import pytest

from envs.grading import reported_run
from envs.grading.grader import grade
from envs.tasks.pytest_summary import PASSED
from envs.tasks.task import HiddenCase, Task

GRADE_TIMEOUT_S = 60.0


def _repo_task(tmp_path, tests_source="def test_three():\n    assert double(3) == 6\n",
               fail_to_pass=("tests/test_new.py::test_three",), **fields):
    """SWE-bench-shaped: calc.py at the base commit (buggy), its new test arriving as a test_patch."""
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text("def double(x):\n    return x + 1\n")
    (repo / "tests" / "test_old.py").write_text("from calc import double\n\ndef test_two():\n    assert double(0) >= 0\n")
    (repo / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    body = "from calc import double\n\n" + tests_source
    lines = body.splitlines(keepends=True)
    test_patch = ("diff --git a/tests/test_new.py b/tests/test_new.py\nnew file mode 100644\n--- /dev/null\n"
                  f"+++ b/tests/test_new.py\n@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}" for line in lines))
    return Task(id="repo-001", repo="t/repo", workspace_dir=str(repo), problem_statement="p",
                test_command="python -m pytest -q -rA -p no:cacheprovider", fail_to_pass=tuple(fail_to_pass),
                pass_to_pass=("tests/test_old.py::test_two",), gold_patch="", stratum="easy", test_files=(),
                test_patch=test_patch, source="swebench", **fields)


_FIX = "def double(x):\n    return x * 2\n"
# Appended to the buggy calc.py: each tries to make the tests pass without the fix.
_EXIT_HOOK_REWRITES = """
import atexit, json, os
def _forge():
    fd = int(os.environ.get("SWERVE_REPORT_FD", "-1"))
    tests = [l.strip() for l in open(os.environ["SWERVE_REPORT_TESTS"]) if l.strip()]
    phases = [["setup", "passed", False], ["call", "passed", False], ["teardown", "passed", False]]
    os.write(fd, json.dumps({"exitstatus": 0, "tests": {t: phases for t in tests},
                             "raised": {t: False for t in tests}, "integrity": []}).encode())
    os._exit(0)
_copy = os.dup(int(os.environ.get("SWERVE_REPORT_FD", "-1")))
os.environ["SWERVE_REPORT_FD"] = str(_copy)
atexit.register(_forge)
"""
_RUNTEST_MADE_A_NO_OP = """
import _pytest.python
_pytest.python.Function.runtest = lambda self: None
"""
_REPORTS_REWRITTEN_BY_A_HOOK = """
import gc, pytest
class _Pass:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        report.outcome = "passed"
        report.longrepr = None
for _manager in [o for o in gc.get_objects() if type(o).__name__ == "PytestPluginManager"]:
    _manager.register(_Pass())
"""
_TESTS_MADE_NO_OPS = """
import gc, pytest
def _noop(*args, **kwargs):
    return None
class _Swap:
    def pytest_collection_modifyitems(self, items):
        for item in items:
            item.obj = _noop
for _manager in [o for o in gc.get_objects() if type(o).__name__ == "PytestPluginManager"]:
    _manager.register(_Swap())
"""
_A_CHILD_KEEPS_THE_CHANNEL = """
import os, time
if os.fork() == 0:
    fd = int(os.environ.get("SWERVE_REPORT_FD", "-1"))
    os.set_inheritable(fd, True)
    time.sleep(8)
    os._exit(0)
"""


@pytest.mark.parametrize("isolation", ["suite", "per_test"])
def test_the_gold_fix_resolves_and_the_bug_does_not(make_sandbox, tmp_path, isolation):
    task = _repo_task(tmp_path)
    sandbox = make_sandbox()
    sandbox.start(task)
    buggy = grade(sandbox, task, GRADE_TIMEOUT_S, isolation)
    assert not buggy.resolved and buggy.test_status == {"tests/test_new.py::test_three": "FAILED",
                                                        "tests/test_old.py::test_two": PASSED}
    assert not buggy.problems, buggy.problems
    sandbox.reset()
    sandbox.write_files({"calc.py": _FIX})
    fixed = grade(sandbox, task, GRADE_TIMEOUT_S, isolation, changed=("calc.py",))
    assert fixed.resolved and not fixed.problems, fixed.output


@pytest.mark.parametrize("code,found", [
    (_EXIT_HOOK_REWRITES, "contradicts|unreadable|not the plugin's shape"),
    (_RUNTEST_MADE_A_NO_OP, "Function.runtest was replaced"),
    (_REPORTS_REWRITTEN_BY_A_HOOK, "pytest_runtest_makereport implemented in a changed file"),
    (_TESTS_MADE_NO_OPS, "ran code from a changed file"),
    (_A_CHILD_KEEPS_THE_CHANNEL, "still held the result channel"),
], ids=["exit_hook_rewrites_the_report", "runtest_made_a_no_op", "reports_rewritten_by_a_hook",
        "tests_made_no_ops", "a_child_keeps_the_channel"])
def test_code_in_a_changed_file_cannot_write_or_bend_the_verdict(make_sandbox, tmp_path, code, found):
    """No detectors here (SWE-bench's policy): the change's code runs in the tested process with
    every power Python has, and what it did shows as a problem."""
    task = _repo_task(tmp_path)
    sandbox = make_sandbox()
    sandbox.start(task)
    sandbox.write_files({"calc.py": "def double(x):\n    return x + 1\n" + code})
    result = grade(sandbox, task, GRADE_TIMEOUT_S, changed=("calc.py",))
    assert not result.resolved, result.output
    assert any(__import__("re").search(found, problem) for problem in result.problems), result.problems


def test_two_thousand_test_ids_grade_the_gold_fix_and_not_the_bug(make_sandbox, tmp_path):
    """A SWE-bench row can list thousands of ids (~100 characters each): far past the 128 KiB one
    command-line argument holds. They travel in a file."""
    name = "test_a_rather_long_name_as_real_suites_have_it_for_the_case_numbered_"
    cases = "".join(f"def {name}{i:04d}():\n    assert double({i}) == {2 * i}\n" for i in range(2000))
    ids = tuple(f"tests/test_new.py::{name}{i:04d}" for i in range(2000))
    assert sum(len(i) + 1 for i in ids) > 128 * 1024
    task = _repo_task(tmp_path, tests_source=cases, fail_to_pass=ids)
    sandbox = make_sandbox()
    sandbox.start(task)
    # A bug that fails the last ten: two thousand failure reports would only time the traceback printer.
    sandbox.write_files({"calc.py": "def double(x):\n    return x * 2 if x < 1990 else x\n"})
    buggy = grade(sandbox, task, GRADE_TIMEOUT_S, changed=("calc.py",))
    assert not buggy.resolved and sum(s == "FAILED" for s in buggy.test_status.values()) == 10, buggy.problems[:3]
    assert sum(s == PASSED for s in buggy.test_status.values()) == 1991
    sandbox.reset()
    sandbox.write_files({"calc.py": _FIX})
    fixed = grade(sandbox, task, GRADE_TIMEOUT_S, changed=("calc.py",))
    assert fixed.resolved and len(fixed.test_status) == 2001, fixed.problems[:3]


def test_hidden_cases_run_without_the_tests_and_before_them(make_sandbox, tmp_path):
    """The hidden run's view has no test file and nothing the visible run writes, even while pytest
    starts beside it (it waits at the gate before any test loads): code that looks for what the
    tests expect finds nothing."""
    repo = tmp_path / "hidden"
    repo.mkdir()
    (repo / "calc.py").write_text(
        "import glob, os, sys, time\n"
        "def seen():\n"
        "    time.sleep(1.0)  # pytest starts beside this call: it must not load the tests meanwhile\n"
        "    return sorted(glob.glob('*.py') + glob.glob('/tmp/visible-*') + glob.glob(os.environ['HOME'] + '/*'))\n"
        "if 'pytest' in sys.modules:  # the visible run leaves a mark where a later run would look\n"
        "    open('/tmp/visible-' + str(os.getpid()), 'w').close()\n"
        "    open('visible-mark.py', 'w').close()\n")
    (repo / "test_calc.py").write_text("from calc import seen\n\ndef test_it():\n    assert 'calc.py' in seen()\n")
    task = Task(id="hidden-001", repo="t/hidden", workspace_dir=str(repo), problem_statement="p",
                test_command="python -m pytest -q -rA -p no:cacheprovider", fail_to_pass=("test_calc.py::test_it",),
                pass_to_pass=(), gold_patch="", stratum="easy", test_files=(),
                hidden_cases=(HiddenCase("calc", "seen", "[]", '["calc.py"]'),))
    sandbox = make_sandbox()
    sandbox.start(task)
    result = grade(sandbox, task, GRADE_TIMEOUT_S)
    assert result.hidden_status == {"hidden#0 calc:seen": PASSED}, result.hidden_status
    assert result.resolved


@pytest.mark.parametrize("payload,found", [
    ("[" * 100_000 + "]" * 100_000, "nested deeper than"),
    ('{"runs": [{"tests": [], "exit_code": 0, "report": "' + "[" * 50 + "]" * 50 + '"}]}', "nested deeper than"),
    ('{"runs": [{"tests": ["t"], "exit_code": 0, "report": "{\\"tests\\": {}, \\"exitstatus\\": ' + "9" * 5000 + '}"}]}',
     "digits"),
    ('{"runs": {"a": 1}}', "not a list"),
    ('{"runs": [{"tests": ["t"], "exit_code": 0, "report": "{\\"tests\\": {\\"t\\": [[[], 1, 2]]}}"}]}', "MISSING"),
])
def test_a_hostile_frame_is_a_problem_never_an_exception(payload, found):
    import base64
    import zlib

    mark = f"{reported_run.GRADING_MARK}n0"
    body = base64.b64encode(zlib.compress(payload.encode())).decode()
    from envs.sandboxes.sandbox import ExecResult

    output = f"shown\n{mark} result\n{body}\n{mark} end\n"
    verdict = reported_run.read(ExecResult(0, output, False, 0.1, False, 10.0), "n0", ["t"])
    assert verdict.exit_code != 0 or verdict.status["t"] != PASSED
    assert found in " ".join(verdict.problems) + " " + " ".join(verdict.status.values()), verdict


_RUNTEST_CODE_SWAPPED = """
import _pytest.python
def _nothing(self):
    return None
_pytest.python.Function.runtest.__code__ = _nothing.__code__
"""
_PLANTS_A_CONFTEST = """
import os
if not os.path.exists("tests/conftest.py"):
    with open("tests/conftest.py", "w") as handle:
        handle.write("import pytest\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport(item, call):\\n"
                     "    outcome = yield\\n    outcome.get_result().outcome = 'passed'\\n")
"""


def test_a_function_whose_code_was_swapped_is_replaced(make_sandbox, tmp_path):
    task = _repo_task(tmp_path)
    sandbox = make_sandbox()
    sandbox.start(task)
    sandbox.write_files({"calc.py": "def double(x):\n    return x + 1\n" + _RUNTEST_CODE_SWAPPED})
    result = grade(sandbox, task, GRADE_TIMEOUT_S, changed=("calc.py",))
    assert not result.resolved and any("Function.runtest was replaced" in p for p in result.problems), result.problems


def test_per_test_runs_do_not_inherit_configuration_an_earlier_test_planted(make_sandbox, tmp_path):
    """per_test: the first test's process writes a conftest that would pass every later test."""
    task = _repo_task(tmp_path)
    sandbox = make_sandbox()
    sandbox.start(task)
    sandbox.write_files({"calc.py": "def double(x):\n    return x + 1\n" + _PLANTS_A_CONFTEST})
    result = grade(sandbox, task, GRADE_TIMEOUT_S, "per_test", changed=("calc.py",))
    assert not result.resolved
    assert any("changed test configuration: ./tests/conftest.py" in p for p in result.problems), result.problems


_REWRITES_THE_PLUGIN_FOR_LATER_RUNS = """
import glob, os
for folder in glob.glob("/tmp/swerve-grade.*"):
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if name.endswith((".py", ".zip", ".txt")) and os.path.isfile(path):
            with open(path, "w") as handle:
                handle.write("")
for fd in os.listdir("/proc/self/fd"):
    try:
        with open("/proc/self/fd/" + fd, "r+b") as handle:
            handle.write(b"PK")
    except OSError:
        pass
"""


def test_what_a_later_per_test_run_loads_cannot_be_rewritten_by_an_earlier_one(make_sandbox, tmp_path):
    """per_test: the first test's process tries to empty every grader file it can name and to
    write through every descriptor it holds; the plugin, ids and changed paths are sealed memfds,
    so the next test's report is still the plugin's, and the bug still fails."""
    task = _repo_task(tmp_path)
    sandbox = make_sandbox()
    sandbox.start(task)
    sandbox.write_files({"calc.py": "def double(x):\n    return x + 1\n" + _REWRITES_THE_PLUGIN_FOR_LATER_RUNS})
    result = grade(sandbox, task, GRADE_TIMEOUT_S, "per_test", changed=("calc.py",))
    assert result.test_status == {"tests/test_new.py::test_three": "FAILED", "tests/test_old.py::test_two": PASSED}
    assert not result.resolved and not result.problems, result.problems


def test_hidden_cases_of_a_row_whose_tests_arrive_with_its_test_patch_run_before_they_exist(make_sandbox, tmp_path):
    """SWE-bench's shape (image rows): the tests come with the test_patch at grading. A hidden call
    looking anywhere for them, by absolute path too, must find nothing: it runs before they exist."""
    task = _repo_task(tmp_path)
    probe = ("import glob, os\n"
             "def seen():\n"
             "    return sorted(p for p in glob.glob('/workspace/tests/*.py') if 'test_new' in p)\n")
    task = dataclasses.replace(task, hidden_cases=(HiddenCase("probe", "seen", "[]", "[]"),))
    sandbox = make_sandbox()
    sandbox.start(task)
    sandbox.write_files({"calc.py": _FIX, "probe.py": probe})
    result = grade(sandbox, task, GRADE_TIMEOUT_S, changed=("calc.py", "probe.py"))
    assert result.hidden_status == {"hidden#0 probe:seen": PASSED}, result.hidden_status
    assert result.resolved, result.problems
