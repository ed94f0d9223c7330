"""What a lease leaves behind: a jail whose owner was killed is ended by the next lease, and reset and
close delete every tree the agent can make (deep, huge, unreadable, badly named, linked) without
waiting for it or being steered by it."""
import os
import signal
import subprocess
import sys
import time

import pytest

from envs.sandboxes import local_sandbox as local_sandbox_module
from envs.sandboxes.cgroups import LeaseCgroup
from envs.sandboxes.disk_quota import loop_unavailable_reason, sweep_stale_disks
from tests.envs.conftest import needs_bwrap, needs_cgroup

_OWNER = """
import sys, time
from configs.schema import SandboxConfig
from envs.sandboxes.local_sandbox import LocalSandbox
from envs.tasks.task import Task
box = LocalSandbox(SandboxConfig(isolation="bwrap", cgroup="required", workdir_root=sys.argv[2]))
box.start(Task(id="t", repo="r", workspace_dir=sys.argv[1], problem_statement="", test_command="true",
               fail_to_pass=(), pass_to_pass=(), gold_patch="", stratum="", test_files=()))
assert box.exec("echo up").output == "up\\n"
print(box.jail_cgroup.procs_files[0], flush=True)
time.sleep(600)
"""


@needs_cgroup
@needs_bwrap
@pytest.mark.slow  # starts an owner process and its jail
def test_a_jail_left_by_a_killed_owner_is_ended_by_the_next_lease(tmp_path):
    """What the owner's stop() never reached (here a stopped process, as one caught in bwrap's
    set-up before its parent-death signal) is in the jail's cgroup, which the next lease's sweep
    ends once the owner is gone."""
    from pathlib import Path

    from envs.sandboxes.cgroups import LeaseCgroup, pid_alive

    (tmp_path / "repo").mkdir()
    owner = subprocess.Popen([sys.executable, "-c", _OWNER, str(tmp_path / "repo"), str(tmp_path)],
                             stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[3])
    straggler = None
    try:
        procs = Path(owner.stdout.readline().strip())
        assert procs.name == "cgroup.procs" and "-jail-" in procs.parent.name, procs
        jail = [int(pid) for pid in procs.read_text().split()]
        assert jail and all("bwrap" in Path(f"/proc/{pid}/cmdline").read_text() or "exec_server" in
                            Path(f"/proc/{pid}/cmdline").read_text() for pid in jail)
        # An orphan, as a jail's leftover is: init reaps it, not this test.
        straggler = int(subprocess.run(["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"], capture_output=True,
                                       text=True, check=True).stdout)
        procs.write_text(str(straggler))
        os.kill(straggler, signal.SIGSTOP)
        owner.kill()
        owner.wait(timeout=10)
        LeaseCgroup.create(64 * 2**20, 16).remove()  # any later lease sweeps the dead owner's cgroups
        assert not procs.parent.exists()
        if loop_unavailable_reason() is None:  # and the dead owner's workspace image, which it had mounted
            swept = sweep_stale_disks()
            assert len(swept) == 1 and swept[0].startswith(str(tmp_path)), swept
            assert local_sandbox_module.wait_for_deleters() == [] and _lease_leftovers(tmp_path) == []
        deadline_s = time.monotonic() + 10
        while pid_alive(straggler) and time.monotonic() < deadline_s:
            time.sleep(0.05)
        assert not pid_alive(straggler)
    finally:
        owner.kill()
        if straggler is not None and pid_alive(straggler):
            os.kill(straggler, signal.SIGKILL)


# Each kind of tree that breaks a recursive walk or a plain rm: depth, count, mode, name, length.
_LEFTOVERS = {
    "depth 3000": "python3 -c 'import os; [(os.mkdir(\"d\"), os.chdir(\"d\")) for _ in range(3000)]'",
    "20000 files": "mkdir flood && cd flood && for d in $(seq 20); do mkdir $d && (cd $d && seq 1000 | xargs touch); done",
    "chmod 000": "mkdir -p locked/inner && touch locked/inner/f && chmod 000 locked/inner locked",
    "non-UTF-8 name": "touch $'bad\\xffname' && mkdir $'dir\\xfe' && touch $'dir\\xfe/x'",
    "past PATH_MAX": "mkdir long && cd long && for i in $(seq 40); do mkdir " + "p" * 200 + " && cd " + "p" * 200
                     + " || exit 1; done && touch leaf",
}


def _lease_leftovers(root) -> list:
    return sorted(name for name in os.listdir(root) if name.startswith("swerve-lease-"))


@pytest.mark.slow
@pytest.mark.parametrize("disk_mb", [0, 64], ids=["moved-aside", "disk-quota"])
def test_reset_and_close_delete_every_tree_the_agent_can_make(make_sandbox, isolation, task_by_id, tmp_path, disk_mb):
    box = make_sandbox(isolation=isolation, disk_mb=disk_mb)
    box.start(task_by_id["textkit-001"])
    pristine = sorted(os.listdir(box.workspace))
    for what, command in _LEFTOVERS.items():
        result = box.exec(command, timeout_s=120)
        assert result.exit_code == 0, (what, result.output[-2000:])
    assert box.exec("chmod 000 .").exit_code == 0  # the workspace root too (same uid as the host's)
    started_s = time.monotonic()
    box.reset()
    print(f"reset with {list(_LEFTOVERS)}: {time.monotonic() - started_s:.3f} s")
    assert sorted(os.listdir(box.workspace)) == pristine
    assert box.exec("ls -A").output.split() == pristine
    started_s = time.monotonic()
    box.close()
    print(f"close (waits for the deletions): {time.monotonic() - started_s:.3f} s")
    assert local_sandbox_module.wait_for_deleters() == []
    assert _lease_leftovers(tmp_path) == []


@pytest.mark.slow
def test_reset_of_twenty_thousand_files_returns_before_they_are_deleted(make_sandbox, task_by_id, tmp_path):
    box = make_sandbox(isolation="none", disk_mb=0)  # with a loop image reset makes a fresh file system instead
    box.start(task_by_id["textkit-001"])
    assert box.exec(_LEFTOVERS["20000 files"], timeout_s=120).exit_code == 0
    started_s = time.monotonic()
    box.reset()
    print(f"reset with 20000 files: {time.monotonic() - started_s:.3f} s")
    assert not (box.workspace / "flood").exists()
    lease = box.workspace.parent.name
    assert [name for name in _lease_leftovers(tmp_path) if name != lease]  # moved aside, not walked
    box.close()
    assert local_sandbox_module.wait_for_deleters() == [] and _lease_leftovers(tmp_path) == []


@needs_bwrap
def test_a_workspace_root_chmod_000_still_runs_the_next_command(make_sandbox, task_by_id):
    box = make_sandbox(isolation="bwrap")
    box.start(task_by_id["textkit-001"])
    # Dirt in /tmp makes the next command start a fresh jail on the chmod'ed workspace.
    box.exec("chmod 000 /workspace; touch /tmp/dirt")
    result = box.exec("pwd; ls textkit")
    assert result.exit_code != 0 and "/workspace" in result.output  # the agent locked itself out
    box.reset()
    assert "case.py" in box.exec("ls textkit").output


def test_a_deleter_cannot_be_steered_by_a_link_in_place_of_the_tree(tmp_path):
    target = tmp_path / "host"
    (target / "keep").mkdir(parents=True)
    os.chmod(target / "keep", 0o500)
    link = tmp_path / "lease"
    link.symlink_to(target)
    assert local_sandbox_module.discard_tree(link) is None
    assert not os.path.lexists(link) and (target / "keep").is_dir()
    assert os.stat(target / "keep").st_mode & 0o777 == 0o500  # chmod -R never saw it
