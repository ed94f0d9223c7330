import dataclasses

import pytest

from envs.grading.grader import grade
from envs.tasks.loaders import load_tasks
from envs.outcomes import InfraError, InfraSource, WorkspaceError
from envs.tasks.pytest_summary import PASSED

ALL_TASKS = load_tasks(split="train") + load_tasks(split="eval")
GRADE_TIMEOUT_S = 60.0


def apply_patch(sandbox, patch: str) -> None:
    sandbox.write_files({".gold.patch": patch})
    result = sandbox.exec("patch -p1 < .gold.patch && rm .gold.patch")
    assert result.exit_code == 0, result.output


@pytest.mark.slow
@pytest.mark.parametrize("task", ALL_TASKS, ids=[task.id for task in ALL_TASKS])
def test_gold_patch_resolves_and_empty_patch_does_not(make_sandbox, task):
    sandbox = make_sandbox()
    sandbox.start(task)
    unfixed = grade(sandbox, task, GRADE_TIMEOUT_S)
    assert not unfixed.resolved and unfixed.exit_code != 0
    assert all(unfixed.test_status[node_id] == "FAILED" for node_id in task.fail_to_pass)
    assert all(unfixed.test_status[node_id] == PASSED for node_id in task.pass_to_pass)
    apply_patch(sandbox, task.gold_patch)
    fixed = grade(sandbox, task, GRADE_TIMEOUT_S)
    assert fixed.resolved and fixed.exit_code == 0, fixed.output
    assert set(fixed.test_status) == set(task.fail_to_pass + task.pass_to_pass)


def test_edited_tests_are_restored_before_grading(make_sandbox, task_by_id):
    task = task_by_id["textkit-003"]
    sandbox = make_sandbox()
    sandbox.start(task)
    sandbox.exec("sed -i 's/== \"hello\"$/== \"he...\"/' tests/test_wrap.py")
    assert '"he..."' in sandbox.read_files(["tests/test_wrap.py"])["tests/test_wrap.py"]
    assert not grade(sandbox, task, GRADE_TIMEOUT_S).resolved


def test_printed_passed_lines_cannot_fake_success(make_sandbox, task_by_id):
    base = task_by_id["textkit-001"]
    fake = "printf 'PASSED %s\\n' " + " ".join(base.fail_to_pass + base.pass_to_pass) + "; exit 1; #"
    task = dataclasses.replace(base, test_command=fake)
    sandbox = make_sandbox()
    sandbox.start(task)
    result = grade(sandbox, task, GRADE_TIMEOUT_S)
    assert all(status == PASSED for status in result.test_status.values())
    assert result.exit_code == 1 and not result.resolved


def test_grading_timeout_scores_unresolved(make_sandbox, task_by_id):
    task = dataclasses.replace(task_by_id["textkit-001"], test_command="sleep 30; #")
    sandbox = make_sandbox()
    sandbox.start(task)
    result = grade(sandbox, task, timeout_s=0.5)
    assert not result.resolved and result.exit_code == 124


def test_closed_sandbox_is_a_grader_infra_error(make_sandbox, task_by_id):
    sandbox = make_sandbox()
    sandbox.start(task_by_id["textkit-001"])
    sandbox.close()
    with pytest.raises(InfraError) as error:
        grade(sandbox, task_by_id["textkit-001"], GRADE_TIMEOUT_S)
    assert error.value.source is InfraSource.GRADER


def _git_repo_task(tmp_path):
    """A SWE-bench-shaped task: a git repository at the base commit plus a test_patch."""
    import subprocess

    from envs.tasks.task import Task

    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text("def double(x):\n    return x + x\n")
    (repo / "tests" / "test_old.py").write_text("from calc import double\n\ndef test_two():\n    assert double(1) == 2\n")
    (repo / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-qm", "base"], check=True)
    test_patch = (
        "diff --git a/tests/test_new.py b/tests/test_new.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/tests/test_new.py\n@@ -0,0 +1,4 @@\n+from calc import double\n+\n+def test_three():\n"
        "+    assert double(3) == 6\n"
    )
    return Task(id="git-001", repo="t/repo", workspace_dir=str(repo), problem_statement="p",
                test_command="python -m pytest -q -rA -p no:cacheprovider",
                fail_to_pass=("tests/test_new.py::test_three",), pass_to_pass=("tests/test_old.py::test_two",),
                gold_patch="", stratum="easy", test_files=(), test_patch=test_patch)


def test_test_patch_is_applied_over_agent_edits(make_sandbox, tmp_path):
    task = _git_repo_task(tmp_path)
    sandbox = make_sandbox()
    sandbox.start(task)
    # The agent writes its own version of the hidden test and weakens an existing one.
    sandbox.write_files({"tests/test_new.py": "def test_three():\n    assert True\n"})
    sandbox.write_files({"tests/test_old.py": "def test_two():\n    assert True\n"})
    sandbox.write_files({"calc.py": "def double(x):\n    return 2\n"})
    result = grade(sandbox, task, GRADE_TIMEOUT_S)
    assert result.test_status == {"tests/test_new.py::test_three": "FAILED", "tests/test_old.py::test_two": PASSED}
    assert not result.resolved
    sandbox.write_files({"calc.py": "def double(x):\n    return x * 2\n"})
    assert grade(sandbox, task, GRADE_TIMEOUT_S).resolved
    assert sandbox.exec("git status --porcelain").output.count(".swerve-test.patch") == 0


def test_test_patch_that_does_not_apply_is_the_callers_to_blame(make_sandbox, tmp_path):
    """grade() cannot tell a broken task from a change that breaks its test_patch: it raises
    WorkspaceError, and grade_on_pristine decides by trying the pristine workspace
    (tests/envs/grading/test_pristine_view.py)."""
    task = dataclasses.replace(_git_repo_task(tmp_path), test_patch="--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n")
    sandbox = make_sandbox()
    sandbox.start(task)
    with pytest.raises(WorkspaceError, match="does not apply"):
        grade(sandbox, task, GRADE_TIMEOUT_S)


# Code appended to textkit/wrap.py (imported by the tests) that tries to decide the verdict itself.
_PRINT_AFTER_SUMMARY = """
import atexit as _a, sys as _s
def _claim():
    _s.stdout.write("".join("PASSED %s\\n" % x for x in _s.argv if "::" in x))
    _s.stdout.flush()
_a.register(_claim)
"""
_EXIT_ZERO_EARLY = """
import os as _o, sys as _s
print("".join("PASSED %s\\n" % x for x in _s.argv if "::" in x)); _s.stdout.flush(); _o._exit(0)
"""
_FORGE_A_REPORT = """
import json as _j, os as _o
_fd = int(_o.environ.get("SWERVE_REPORT_FD", "-1"))
if _fd >= 0:
    _t = [l.strip() for l in open(_o.environ["SWERVE_REPORT_TESTS"]) if l.strip()]
    _o.write(_fd, _j.dumps({"exitstatus": 0, "tests": {t: [["setup", "passed", False], ["call", "passed", False],
        ["teardown", "passed", False]] for t in _t}, "raised": {t: False for t in _t}, "other_reports": 0}).encode())
    _o._exit(1)
"""


@pytest.mark.parametrize("code", [_PRINT_AFTER_SUMMARY, _EXIT_ZERO_EARLY, _FORGE_A_REPORT],
                         ids=["passed_lines_after_the_summary", "exit_0_at_import", "report_forged_exit_1"])
def test_the_tested_process_cannot_write_its_own_verdict(make_sandbox, task_by_id, code):
    """The verdict comes from the grader's plugin, cross-checked with the run's exit code: lines
    printed by the tested code, an early exit 0 or a report written with another exit code fail."""
    task = task_by_id["textkit-003"]
    sandbox = make_sandbox()
    sandbox.start(task)
    sandbox.write_files({"textkit/wrap.py": sandbox.read_files(["textkit/wrap.py"])["textkit/wrap.py"] + code})
    result = grade(sandbox, task, GRADE_TIMEOUT_S)
    assert not result.resolved, result.output
    assert result.test_status[task.fail_to_pass[0]] != PASSED or result.problems


@pytest.mark.slow
def test_a_second_frame_or_output_after_the_frame_is_not_trusted(make_sandbox, task_by_id, monkeypatch):
    """A background process that outlives pytest and writes after the grader's frame (or a frame
    of its own) leaves a frame that is not the output's end: a problem, never a pass."""
    from envs.grading import grader

    task = task_by_id["textkit-003"]
    sandbox = make_sandbox()
    sandbox.start(task)
    honest = grade(sandbox, task, GRADE_TIMEOUT_S)
    assert not honest.problems and honest.test_status[task.pass_to_pass[0]] == PASSED
    real_exec = sandbox.exec

    def written_after(command, timeout_s=None):
        result = real_exec(command, timeout_s)
        return dataclasses.replace(result, output=result.output + "late line\n")

    monkeypatch.setattr(sandbox, "exec", written_after)
    late = grader.grade(sandbox, task, GRADE_TIMEOUT_S)
    assert late.problems == ["the grader's report frame is missing or altered"] and not late.resolved


@pytest.mark.slow
def test_hidden_cases_fail_an_always_equal_result(make_sandbox, tmp_path):
    """The tests pass with an object whose __eq__ is always true; the hidden case, compared as
    plain JSON outside the tested process, does not."""
    from envs.tasks.task import HiddenCase, Task

    repo = tmp_path / "eq"
    repo.mkdir()
    (repo / "calc.py").write_text("class _R(int):\n    def __eq__(self, other):\n        return True\n\n"
                                  "def double(x):\n    return _R(0)\n")
    (repo / "test_calc.py").write_text("from calc import double\n\ndef test_double():\n    assert double(2) == 4\n")
    case = HiddenCase("calc", "double", "[5]", "10")
    task = Task(id="eq-001", repo="t/eq", workspace_dir=str(repo), problem_statement="p",
                test_command="python -m pytest -q -rA -p no:cacheprovider", fail_to_pass=("test_calc.py::test_double",),
                pass_to_pass=(), gold_patch="", stratum="easy", test_files=(), hidden_cases=(case,))
    sandbox = make_sandbox()
    sandbox.start(task)
    fooled = grade(sandbox, task, GRADE_TIMEOUT_S)
    assert fooled.test_status == {"test_calc.py::test_double": PASSED} and not fooled.resolved
    assert fooled.hidden_status == {"hidden#0 calc:double": "FAILED (TypeError: not a plain JSON value: _R)"}
    sandbox.write_files({"calc.py": "def double(x):\n    return x * 2\n"})
    fixed = grade(sandbox, task, GRADE_TIMEOUT_S)
    assert fixed.resolved and fixed.hidden_status == {"hidden#0 calc:double": "PASSED"}
    sandbox.write_files({"calc.py": "def double(x):\n    return True if x == 2 else x * 2 + 1\n"})
    assert grade(sandbox, task, GRADE_TIMEOUT_S).hidden_status == {"hidden#0 calc:double": "FAILED (wrong value)"}


def _hidden_task(tmp_path, source, test, cases):
    """A one-module task (calc.py, test_calc.py) graded with `cases`."""
    from envs.tasks.task import Task

    repo = tmp_path / "hidden"
    repo.mkdir()
    (repo / "calc.py").write_text(source)
    (repo / "test_calc.py").write_text(test)
    return Task(id="hidden-001", repo="t/hidden", workspace_dir=str(repo), problem_statement="p",
                test_command="python -m pytest -q -rA -p no:cacheprovider", fail_to_pass=("test_calc.py::test_it",),
                pass_to_pass=(), gold_patch="", stratum="easy", test_files=(), hidden_cases=tuple(cases))


_ALWAYS_EQUAL = "class _R(int):\n    def __eq__(self, other):\n        return True\n\n"


@pytest.mark.slow
def test_method_hidden_cases_fail_an_always_equal_result(make_sandbox, tmp_path):
    """A method called on a receiver built from plain values, and an object graded through its
    attributes: an always-equal value, returned or held in an attribute, fails either way."""
    from envs.tasks.task import HiddenCase

    forged = (_ALWAYS_EQUAL + "class Box:\n    def __init__(self, n):\n        self.n = n\n"
              "    def doubled(self):\n        return _R(0)\n    def grown(self):\n        return Box(_R(0))\n")
    test = "from calc import Box\n\ndef test_it():\n    assert Box(2).doubled() == 4 and Box(2).grown().n == 4\n"
    cases = [HiddenCase("calc", "Box.doubled", "[]", "10", init_json="[5]"),
             HiddenCase("calc", "Box.grown", "[]", '{"n": 10}', init_json="[5]", result_attrs=("n",))]
    task = _hidden_task(tmp_path, forged, test, cases)
    sandbox = make_sandbox()
    sandbox.start(task)
    fooled = grade(sandbox, task, GRADE_TIMEOUT_S)
    assert fooled.test_status == {"test_calc.py::test_it": PASSED} and not fooled.resolved
    assert fooled.hidden_status == {"hidden#0 calc:Box.doubled": "FAILED (TypeError: not a plain JSON value: _R)",
                                    "hidden#1 calc:Box.grown": "FAILED (TypeError: not a plain JSON value: _R)"}
    sandbox.write_files({"calc.py": "class Box:\n    def __init__(self, n):\n        self.n = n\n"
                                  "    def doubled(self):\n        return self.n * 2\n"
                                  "    def grown(self):\n        return Box(self.n * 2)\n"})
    fixed = grade(sandbox, task, GRADE_TIMEOUT_S)
    assert fixed.resolved and set(fixed.hidden_status.values()) == {"PASSED"}, fixed.hidden_status


_CHECK = "def check(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n"
_DISGUISED = ("class ValueError(Exception):\n    __module__ = 'builtins'\n\n"
              "def check(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n")
_REBOUND = ("import builtins\n\nclass Mine(Exception):\n    pass\n\nbuiltins.ValueError = Mine\n\n"
            "def check(x):\n    if x < 0:\n        raise Mine('negative')\n    return x\n")
_NO_RAISE = "def check(x):\n    return x\n"


@pytest.mark.parametrize("source, verdict", [
    (_CHECK, "PASSED"),
    (_DISGUISED, "FAILED (TypeError: raised a class that builtins.ValueError does not name)"),
    (_REBOUND, "FAILED (raised calc.Mine, expected builtins.ValueError)"),
    (_NO_RAISE, "FAILED (returned, expected builtins.ValueError raised)"),
], ids=["correct", "own_class_named_ValueError", "builtins_rebound", "no_raise"])
def test_exception_hidden_case_needs_the_real_class(make_sandbox, tmp_path, source, verdict):
    """An expected raise compares the exact class by its module and qualname, and the runner names
    a class only when that name resolves to it: a class of the tested code's own that calls itself
    builtins.ValueError, or one bound over builtins.ValueError, is not it."""
    from envs.tasks.task import HiddenCase

    test = "import pytest\nfrom calc import check\n\ndef test_it():\n    with pytest.raises(Exception):\n        check(-1)\n"
    task = _hidden_task(tmp_path, source, test, [HiddenCase("calc", "check", "[-1]", "null", raises="builtins.ValueError")])
    sandbox = make_sandbox()
    sandbox.start(task)
    result = grade(sandbox, task, GRADE_TIMEOUT_S)
    assert result.hidden_status == {"hidden#0 calc:check": verdict}
    assert result.resolved == (verdict == "PASSED")
    # The forgers raise something, so the visible test passes: only the hidden case tells.
    assert (result.test_status == {"test_calc.py::test_it": PASSED}) == (source != _NO_RAISE)


@pytest.mark.slow
def test_a_hidden_case_that_never_returns_fails_within_its_share_of_the_limit(make_sandbox, tmp_path):
    """The hidden cases get min(60 s, a quarter of the grading limit), whole seconds, at least 1."""
    import time

    from envs.tasks.task import HiddenCase, Task

    repo = tmp_path / "loop"
    repo.mkdir()
    (repo / "calc.py").write_text("def double(x):\n    while True:\n        pass\n")
    (repo / "test_calc.py").write_text("def test_nothing():\n    assert True\n")
    task = Task(id="loop-001", repo="t/loop", workspace_dir=str(repo), problem_statement="p",
                test_command="python -m pytest -q -rA -p no:cacheprovider", fail_to_pass=("test_calc.py::test_nothing",),
                pass_to_pass=(), gold_patch="", stratum="easy", test_files=(),
                hidden_cases=(HiddenCase("calc", "double", "[1]", "2"),))
    sandbox = make_sandbox()
    sandbox.start(task)
    started_s = time.monotonic()
    result = grade(sandbox, task, timeout_s=2.0)
    print(f"graded in {time.monotonic() - started_s:.1f} s")
    assert result.test_status == {"test_calc.py::test_nothing": PASSED} and not result.problems
    assert result.hidden_status == {"hidden#0 calc:double": "FAILED (no results from the runner)"}
    assert not result.resolved
