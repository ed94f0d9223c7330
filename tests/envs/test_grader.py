import dataclasses

import pytest

from envs.grader import grade
from envs.loaders import load_tasks
from envs.outcomes import InfraError, InfraSource
from envs.pytest_summary import PASSED

ALL_TASKS = load_tasks(split="train") + load_tasks(split="eval")
GRADE_TIMEOUT_S = 60.0


def apply_patch(sandbox, patch: str) -> None:
    sandbox.write_file(".gold.patch", patch)
    result = sandbox.exec("patch -p1 < .gold.patch && rm .gold.patch")
    assert result.exit_code == 0, result.output


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
    assert '"he..."' in sandbox.read_file("tests/test_wrap.py")
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

    from envs.tasks import Task

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
    sandbox.write_file("tests/test_new.py", "def test_three():\n    assert True\n")
    sandbox.write_file("tests/test_old.py", "def test_two():\n    assert True\n")
    sandbox.write_file("calc.py", "def double(x):\n    return 2\n")
    result = grade(sandbox, task, GRADE_TIMEOUT_S)
    assert result.test_status == {"tests/test_new.py::test_three": "FAILED", "tests/test_old.py::test_two": PASSED}
    assert not result.resolved
    sandbox.write_file("calc.py", "def double(x):\n    return x * 2\n")
    assert grade(sandbox, task, GRADE_TIMEOUT_S).resolved
    assert sandbox.exec("git status --porcelain").output.count(".swerve-test.patch") == 0


def test_test_patch_that_does_not_apply_is_a_grader_infra_error(make_sandbox, tmp_path):
    task = dataclasses.replace(_git_repo_task(tmp_path), test_patch="--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n")
    sandbox = make_sandbox()
    sandbox.start(task)
    with pytest.raises(InfraError) as error:
        grade(sandbox, task, GRADE_TIMEOUT_S)
    assert error.value.source is InfraSource.GRADER
