"""Host resources one lease can take (envs/sandboxes/disk_quota.py, local_sandbox.py): its disk is
bounded by sandbox.disk_mb (a loop image, else counted and reset), its memory-backed scratch by
sandbox.tmpfs_mb, a reset that fails leaves nothing behind, and no workspace pins memory."""
import logging
import os
import tempfile

import pytest

from configs.schema import SandboxConfig
from envs.outcomes import InfraError
from envs.sandboxes import disk_quota
from envs.sandboxes import local_sandbox as local_sandbox_module
from envs.sandboxes.disk_quota import lease_root, loop_unavailable_reason
from envs.sandboxes.local_sandbox import LocalSandbox
from tests.envs.conftest import needs_bwrap

needs_loop = pytest.mark.skipif(loop_unavailable_reason() is not None,
                                reason=f"no loop image here: {loop_unavailable_reason()}")
_MIB = 1024 * 1024
# 30 MB in 5 MB files, each under sandbox.max_file_mb: only a quota over the lease stops them.
_FILL_30_MB = "for i in 1 2 3 4 5 6; do head -c 5M /dev/zero > blob$i.bin || exit 1; done"


def _lease_entries(root) -> list:
    return sorted(name for name in os.listdir(root) if name.startswith("swerve-lease-"))


@needs_loop
def test_writes_past_the_loop_quota_fail_in_the_command_and_the_host_keeps_its_disk(make_sandbox, isolation,
                                                                                   task_by_id):
    box = make_sandbox(isolation=isolation, disk_mb=20)
    box.start(task_by_id["textkit-001"])
    result = box.exec(_FILL_30_MB)
    assert result.exit_code != 0 and "No space left on device" in result.output
    image = box.workspace.parent / disk_quota.image_name(os.getpid())
    assert os.stat(image).st_blocks * 512 <= 20 * _MIB  # what the host pays: at most the quota
    box.reset()
    assert "blob1.bin" not in box.exec("ls").output
    assert box.exec("head -c 5M /dev/zero > ok.bin && ls ok.bin").exit_code == 0  # the fresh disk takes files
    box.close()
    assert not image.exists() and not os.path.ismount(image.parent / "workspace")


def test_without_a_loop_image_a_workspace_over_the_quota_is_reset_and_told(make_sandbox, isolation, task_by_id,
                                                                         monkeypatch, caplog):
    monkeypatch.setattr(local_sandbox_module, "loop_unavailable_reason", lambda: "not root (a test)")
    monkeypatch.setattr(disk_quota, "_warned_no_loop_disk", False)
    box = make_sandbox(isolation=isolation, disk_mb=20)
    with caplog.at_level(logging.WARNING, logger="envs.sandboxes.disk_quota"):
        box.start(task_by_id["textkit-001"])
    assert "no loop image for sandbox.disk_mb (not root (a test))" in caplog.text
    assert box.exec("head -c 5M /dev/zero > small.bin").exit_code == 0  # under the quota: kept
    result = box.exec(_FILL_30_MB)
    assert result.exit_code == 1 and "over its quota sandbox.disk_mb=20" in result.output, result.output
    assert box.exec("ls").output.split() == ["pytest.ini", "tests", "textkit"]  # the task's initial state
    assert local_sandbox_module.wait_for_deleters() == []
    assert len(_lease_entries(box.workspace.parent.parent)) == 1  # the over-quota workspace is gone


def test_a_task_bigger_than_the_quota_is_refused_naming_the_fix(make_sandbox, task_by_id, tmp_path):
    from dataclasses import replace

    big = tmp_path / "big-repo"
    big.mkdir()
    (big / "data.bin").write_bytes(b"\0" * (12 * _MIB))
    box = make_sandbox(isolation="none", disk_mb=8)
    with pytest.raises(InfraError, match=r"sandbox.disk_mb=8 \(raise it\)"):
        box.start(replace(task_by_id["textkit-001"], workspace_dir=str(big)))
    assert local_sandbox_module.wait_for_deleters() == [] and _lease_entries(tmp_path) == []


@pytest.mark.parametrize("disk_mb", [0, 20], ids=["moved-aside", "disk-quota"])
def test_a_reset_whose_copy_fails_leaves_nothing_behind(make_sandbox, task_by_id, tmp_path, monkeypatch, disk_mb):
    if disk_mb and loop_unavailable_reason() is not None:
        pytest.skip(loop_unavailable_reason())
    box = make_sandbox(isolation="none", disk_mb=disk_mb)
    box.start(task_by_id["textkit-001"])
    box.exec("head -c 4M /dev/zero > agent.bin")

    def fail_copy():
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(box, "_copy_workspace", fail_copy)
    with pytest.raises(InfraError, match="No space left on device"):
        box.reset()
    assert local_sandbox_module.wait_for_deleters() == []
    assert len(_lease_entries(tmp_path)) == 1  # the lease itself: nothing renamed aside stays
    box.close()
    assert local_sandbox_module.wait_for_deleters() == [] and _lease_entries(tmp_path) == []


@needs_bwrap
def test_the_jails_tmp_and_dev_shm_are_capped(make_sandbox, task_by_id):
    box = make_sandbox(isolation="bwrap", tmpfs_mb=8)
    box.start(task_by_id["textkit-001"])
    for where in ("/tmp", "/dev/shm"):
        result = box.exec(f"head -c 12M /dev/zero > {where}/fill.bin")
        assert result.exit_code != 0 and "No space left on device" in result.output, (where, result.output)
        assert box.exec(f"ls -A {where} | wc -l").output.strip() == "0"  # and gone for the next command
    assert "Read-only file system" in box.exec("head -c 12M /dev/zero > /dev/fill.bin").output


def test_a_memory_backed_workdir_root_is_refused_naming_the_fix(tmp_path, monkeypatch):
    if disk_quota.filesystem_type("/dev/shm") not in disk_quota.MEMORY_FILESYSTEMS:
        pytest.skip("/dev/shm is not memory-backed here")
    with pytest.raises(ValueError, match=r"sandbox.workdir_root='/dev/shm' is on .*set sandbox.workdir_root"):
        LocalSandbox(SandboxConfig(workdir_root="/dev/shm"))
    # The default root moves to /var/tmp when the system temporary directory is in memory.
    monkeypatch.setattr(tempfile, "gettempdir", lambda: "/dev/shm")
    assert lease_root("") == disk_quota.DISK_TEMP_DIR
    assert lease_root(str(tmp_path)) == str(tmp_path)


@pytest.mark.parametrize("field,value,fix", [("disk_mb", 4, "0 \\(no quota\\) or at least 8"),
                                             ("disk_mb", -1, "at least 8"), ("tmpfs_mb", 0, "tmpfs_mb=256")])
def test_bad_limits_are_refused_naming_the_fix(field, value, fix):
    with pytest.raises(ValueError, match=f"sandbox.{field}={value}.*{fix}"):
        LocalSandbox(SandboxConfig(**{field: value}))


_MOUNT_AND_DIE = """
import os, sys
from pathlib import Path
from envs.sandboxes.disk_quota import LoopDisk, image_name
lease = Path(sys.argv[1])
LoopDisk.create(lease / image_name(os.getpid()), lease / "workspace", 16)
(lease / "workspace" / "kept").write_text("x")
"""


@needs_loop
def test_an_image_mounted_by_a_dead_owner_is_swept_even_after_its_file_was_deleted(tmp_path):
    """An owner that died without closing its lease leaves a mounted image; someone deleting the lease
    folder's files (a temp-dir cleaner) removes the image's name but not the mount or its loop device.
    The kernel still knows the image's name, so the next sweep finds the dead owner and frees both."""
    import subprocess
    import sys
    from pathlib import Path

    lease = tmp_path / f"{disk_quota.LEASE_PREFIX}dead"
    (lease / "workspace").mkdir(parents=True)
    subprocess.run([sys.executable, "-c", _MOUNT_AND_DIE, str(lease)], check=True, timeout=60,
                   cwd=Path(__file__).resolve().parents[3])
    assert os.path.ismount(lease / "workspace")
    (image,) = lease.glob("disk-*.img")
    image.unlink()
    swept = disk_quota.sweep_stale_disks()
    assert str(lease / "workspace") in swept
    assert local_sandbox_module.wait_for_deleters() == []
    assert not os.path.ismount(lease / "workspace") and not lease.exists()


@needs_loop
def test_a_sweep_that_loses_the_race_to_another_sweeper_says_nothing(tmp_path, monkeypatch, caplog):
    """Every sandbox starting on a node sweeps the same mount table: one that read the table before
    another unmounted the image finds it gone ("umount: not mounted"), which is no failure to report."""
    import subprocess
    import sys
    from pathlib import Path

    lease = tmp_path / f"{disk_quota.LEASE_PREFIX}raced"
    (lease / "workspace").mkdir(parents=True)
    subprocess.run([sys.executable, "-c", _MOUNT_AND_DIE, str(lease)], check=True, timeout=60,
                   cwd=Path(__file__).resolve().parents[3])
    table = disk_quota._mount_table()  # what this sweeper read, before the other one acted
    subprocess.run(["umount", "--lazy", str(lease / "workspace")], check=True, timeout=60)  # the other sweeper
    monkeypatch.setattr(disk_quota, "_mount_table", lambda: table)
    with caplog.at_level("WARNING", logger=disk_quota.log.name):
        swept = disk_quota.sweep_stale_disks()
    assert str(lease / "workspace") not in swept  # the other sweeper's, not this one's
    assert not [r for r in caplog.records if "cannot sweep" in r.getMessage()]
    # Still mounted is still reported: the same stale table, with the image mounted again by a dead owner.
    subprocess.run([sys.executable, "-c", _MOUNT_AND_DIE, str(lease)], check=True, timeout=60,
                   cwd=Path(__file__).resolve().parents[3])
    monkeypatch.setattr(disk_quota, "_run", lambda argv: (_ for _ in ()).throw(OSError("umount: target is busy")))
    monkeypatch.setattr(disk_quota, "_mount_table", lambda: table)
    with caplog.at_level("WARNING", logger=disk_quota.log.name):
        disk_quota.sweep_stale_disks()
    assert [r for r in caplog.records if "cannot sweep" in r.getMessage()]
    monkeypatch.undo()
    assert str(lease / "workspace") in disk_quota.sweep_stale_disks()
