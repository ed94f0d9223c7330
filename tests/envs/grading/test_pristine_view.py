"""Grading on the pristine view: what the agent left is bounded, clashes are refused before
anything is written, a defeated reset replaces the sandbox, and only a task broken on its own
is an infra error."""
import dataclasses

import pytest

from configs.schema import SandboxConfig, SWEEnvConfig
from envs.outcomes import ActorLost, InfraError, InfraSource
from envs.grading.pristine_view import conflicts, grade_on_pristine, take_change_and_reset
from envs.grading.workspace_change import Manifest, take_manifest

SWE = SWEEnvConfig(grade_timeout_s=60.0)


def _manifest(*paths):
    return Manifest({path: ("f", "0" * 24) for path in paths})


@pytest.mark.parametrize("pristine,written,deleted,clash", [
    (("pkg/a.py", "pkg/b.py"), ["pkg"], ["pkg/a.py"], "pkg is a file in the change but a folder"),
    (("pkg/a.py",), ["pkg/a.py/x.py"], [], "needs pkg/a.py to be a folder"),
    (("pkg/a.py",), ["pkg/a.py/x.py"], ["pkg/a.py"], ""),
    (("pkg/a.py", "pkg/b.py"), ["pkg"], ["pkg/a.py", "pkg/b.py"], ""),
    (("mod.py",), ["tests"], [], "needs tests to be a folder"),
    (("mod.py",), ["tests/test_mod.py/keep"], [], "tests/test_mod.py is a file in the change but a folder"),
], ids=["folder_kept_file_written", "file_kept_folder_written", "file_became_folder", "folder_became_file",
        "file_where_grading_writes_a_folder", "folder_where_grading_writes_a_file"])
def test_conflicts_name_every_clash_with_the_graded_view(task_by_id, pristine, written, deleted, clash):
    task = dataclasses.replace(task_by_id["textkit-003"], test_files=(("tests/test_mod.py", "x"),))
    found = conflicts(_manifest(*pristine), written, tuple(deleted), task)
    assert (clash in found) if clash else found == "", found


def test_change_beyond_the_bounds_is_refused_unread(make_sandbox, task_by_id):
    task = task_by_id["textkit-003"]
    sandbox = make_sandbox()
    sandbox.start(task)
    pristine = take_manifest(sandbox, SWE)
    sandbox.exec("for i in 1 2 3; do head -c 2000 /dev/zero | tr '\\0' x > blob$i.txt; done")
    small = dataclasses.replace(SWE, max_change_bytes=5000)
    change = take_change_and_reset(sandbox, task, pristine, small)
    assert "6000 changed bytes, more than env.swe.max_change_bytes=5000" in change.refused
    assert change.written == {} and change.model_patch == ""
    assert take_manifest(sandbox, SWE) == pristine  # reset all the same
    sandbox.exec("for i in 1 2 3; do echo > f$i.py; done")
    assert "env.swe.max_changed_files=2" in take_change_and_reset(sandbox, task, pristine,
                                                            dataclasses.replace(SWE, max_changed_files=2)).refused


def test_a_reset_the_workspace_defeats_replaces_the_sandbox(make_sandbox, task_by_id, monkeypatch):
    task = task_by_id["textkit-003"]
    sandbox = make_sandbox()
    sandbox.start(task)
    pristine = take_manifest(sandbox, SWE)
    sandbox.exec("echo 'x = 1' > extra.py")
    real_reset = sandbox.reset

    def fails_once():
        monkeypatch.setattr(sandbox, "reset", real_reset)
        raise OSError("rm: cannot remove 'trap': Operation not permitted")

    monkeypatch.setattr(sandbox, "reset", fails_once)
    verdict = grade_on_pristine(sandbox, task, pristine, SWE, SandboxConfig())
    assert not verdict.resolved and "the sandbox was replaced" in verdict.reason and verdict.result is None
    assert take_manifest(sandbox, SWE) == pristine and sandbox.exec("true").exit_code == 0


def test_a_sandbox_that_dies_under_the_reset_is_an_infra_error_not_the_agents_refusal(make_sandbox, task_by_id,
                                                                                    monkeypatch):
    """A dead lease is the machinery's failure: it reaches the episode as InfraError (never scored,
    never trained), where swallowing it would score the agent 0 for a crash it did not cause."""
    task = task_by_id["textkit-003"]
    sandbox = make_sandbox()
    sandbox.start(task)
    pristine = take_manifest(sandbox, SWE)
    sandbox.exec("echo 'x = 1' > extra.py")

    def dies():
        raise ActorLost(InfraSource.SANDBOX, "reset on sandbox actor failed: RayActorError")

    monkeypatch.setattr(sandbox, "reset", dies)
    with pytest.raises(InfraError, match="RayActorError") as error:
        take_change_and_reset(sandbox, task, pristine, SWE)
    assert error.value.source is InfraSource.SANDBOX
    with pytest.raises(InfraError):  # also where the change is refused before it is read
        take_change_and_reset(sandbox, task, pristine, dataclasses.replace(SWE, max_changed_files=0))


def test_a_task_whose_test_patch_fails_unchanged_is_an_infra_error(make_sandbox, task_by_id):
    """Not the agent's doing: re-run, and quarantined if it keeps failing (`swerve tasks validate`
    finds it first)."""
    task = dataclasses.replace(task_by_id["textkit-003"], source="swebench", test_files=(),
                               test_patch="--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n")
    sandbox = make_sandbox()
    sandbox.start(task)
    pristine = take_manifest(sandbox, SWE)
    sandbox.exec("sed -i 's/if len(text) < width:/if len(text) <= width:/' textkit/wrap.py")
    with pytest.raises(InfraError, match="cannot be graded even unchanged") as error:
        grade_on_pristine(sandbox, task, pristine, SWE, SandboxConfig())
    assert error.value.source is InfraSource.GRADER


class CountingSandbox:
    """A sandbox that counts the calls reaching it: each is a round trip through the sandbox
    actor (and a docker or envd request behind it)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []
        self.runs_images = inner.runs_images

    def start(self, task):
        self.calls.append("start")
        self.inner.start(task)

    def exec(self, command, timeout_s=None):
        self.calls.append("exec")
        return self.inner.exec(command, timeout_s)

    def read_files(self, paths):
        self.calls.append("read_files")
        return self.inner.read_files(paths)

    def write_files(self, files):
        self.calls.append("write_files")
        self.inner.write_files(files)

    def reset(self):
        self.calls.append("reset")
        self.inner.reset()

    def close(self):
        self.inner.close()


@pytest.mark.parametrize("files", [1, 24])
def test_grading_costs_the_same_round_trips_for_one_changed_file_or_many(make_sandbox, task_by_id, files):
    task = task_by_id["textkit-003"]
    sandbox = CountingSandbox(make_sandbox())
    sandbox.start(task)
    pristine = take_manifest(sandbox, SWE)
    sandbox.exec("rm textkit/case.py; " + "; ".join(f"echo 'X = {i}' > textkit/extra_{i}.py" for i in range(files)))
    sandbox.calls.clear()
    verdict = grade_on_pristine(sandbox, task, pristine, SWE, SandboxConfig())
    assert verdict.result is not None and f"textkit/extra_{files - 1}.py" in verdict.change.model_patch
    assert "deleted file mode" in verdict.change.model_patch
    # listing, read, reset, listing, read old, rm, write the change, the test files, the
    # supervisor's input, the supervised run (the hidden cases, then the tests).
    assert sandbox.calls == ["exec", "read_files", "reset", "exec", "read_files", "exec", "write_files",
                             "write_files", "write_files", "exec"], sandbox.calls


def test_a_folder_where_grading_writes_the_test_patch_is_a_clash(task_by_id):
    """Grading writes .swerve-test.patch into the workspace: the agent's folder there failed that
    write with IsADirectoryError after the change was laid (an exception out of grading)."""
    base = task_by_id["textkit-003"]
    task = dataclasses.replace(base, test_files=(), test_patch="--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-x\n+y\n")
    found = conflicts(_manifest("mod.py"), [".swerve-test.patch/x/a.txt"], (), task)
    assert ".swerve-test.patch is a file in the change but a folder in the graded view" in found
    assert conflicts(_manifest("mod.py"), [".swerve-test.patch/x/a.txt"], (), base) == ""  # no test_patch, no clash


def test_a_folder_where_grading_writes_its_input_is_a_clash(task_by_id):
    """The supervisor's input file (or the ids file of a command graded by its summary) is written
    into the workspace at grading: the agent's folder there is its clash, never an exception."""
    from envs.grading.grader import IDS_FILE
    from envs.grading.reported_run import INPUT_FILE

    task = task_by_id["textkit-003"]
    found = conflicts(_manifest("mod.py"), [f"{INPUT_FILE}/a.txt"], (), task)
    assert f"{INPUT_FILE} is a file in the change but a folder in the graded view" in found
    by_summary = dataclasses.replace(task, test_command="bash run_tests.sh")
    assert IDS_FILE in conflicts(_manifest("mod.py"), [f"{IDS_FILE}/a.txt"], (), by_summary)
