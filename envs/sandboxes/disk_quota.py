"""Per-lease disk quota of the local backend (sandbox.disk_mb), and where a lease's files may live.

Loop image (root, loop devices, mkfs.ext4): a lease's workspace is its own ext4 file system in a
sparse image file of disk_mb under the lease folder. A write past it fails with ENOSPC in the
agent's own command (its outcome, never the host's disk); reset makes a fresh file system instead
of walking what the agent left. A mount needs root, so without one the lease falls back to:
Counted: after every command the workspace is measured (`du -sx`, bounded in time) and a
workspace over the quota is put back to the task's initial state, the agent told why. One command
can then write past the quota for as long as its time limit lets it, and grading's commands are
counted too (the agent's code writing during the tests resets the workspace under the grader);
the loop image cannot be written past at all.
A workspace on a memory-backed file system (tmpfs, ramfs) is refused: its files would pin the
lease's memory limit, and the grader's own commands, run in that limit, would be OOM-killed.
"""
from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

from envs.sandboxes.cgroups import pid_alive
from envs.sandboxes.tree_delete import discard_tree

log = logging.getLogger(__name__)

MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")
# Where a lease's files go when the system temporary directory is memory-backed (FHS: kept on disk).
DISK_TEMP_DIR = "/var/tmp"
LEASE_PREFIX = "swerve-lease-"
_LEASE_MOUNT = re.compile(rf"/{LEASE_PREFIX}[^/]*/workspace$")
# The image is named after its owner's pid, so that a later lease knows when the owner is gone
# (the lease folder's name stays short: a gateway socket's path lives under it).
_IMAGE_NAME = re.compile(r"disk-(\d+)\.img")


def image_name(owner_pid: int) -> str:
    return f"disk-{owner_pid}.img"
# mkfs, mount and umount of a small file system; a umount also writes back what the agent wrote.
_TOOL_TIMEOUT_S = 120.0
# Enough inodes for a workspace of many small files (an agent may make 200,000 empty ones), yet
# never more than one per KiB (ext4's floor): the tables come out of disk_mb.
_MIN_INODES = 1 << 18
_BYTES_PER_INODE = 4096
_MIB = 1024 * 1024
# The smallest sandbox.disk_mb an ext4 image holds with room for a workspace.
MIN_DISK_MB = 8
# How long measuring a lease's disk (the counted quota) may take before it counts as over.
MEASURE_TIMEOUT_S = 10.0
_warned_no_loop_disk = False


def check_limits(disk_mb: int, tmpfs_mb: int) -> None:
    """ValueError naming the fix for sandbox.disk_mb or sandbox.tmpfs_mb out of bounds (checked by the
    backend: a SandboxConfig built in code never went through the config loader)."""
    if disk_mb != 0 and disk_mb < MIN_DISK_MB:
        raise ValueError(f"sandbox.disk_mb={disk_mb}; it must be 0 (no quota) or at least {MIN_DISK_MB}")
    if tmpfs_mb < 1:
        raise ValueError(f"sandbox.tmpfs_mb={tmpfs_mb}; it must be at least 1 (e.g. sandbox.tmpfs_mb=256)")


def _mounts() -> List[Tuple[str, str]]:
    """(mount point, file system type) of every mount this process sees, in mount order."""
    return [(mount_point, kind) for mount_point, kind, _ in _mount_table()]


def _mount_table() -> List[Tuple[str, str, str]]:
    """(mount point, file system type, source) of every mount this process sees, in mount order."""
    found = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields, _, rest = line.partition(" - ")
            # mountinfo escapes space, tab, newline and backslash as octal.
            mount_point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields.split()[4])
            kind, source = (rest.split() + ["", ""])[:2]
            found.append((mount_point, kind, source))
    return found


def _owner_pid(lease_dir: Path, source: str) -> Optional[int]:
    """The pid of the process that mounted a lease's image: from the loop device's backing file,
    whose name the kernel keeps after the image is deleted (a lease folder someone else emptied
    still holds a mounted image and a loop device), else from the image in the lease folder."""
    names: List[str] = []
    device = os.path.basename(source)
    if source.startswith("/dev/loop"):
        try:
            with open(f"/sys/block/{device}/loop/backing_file") as handle:
                names.append(os.path.basename(handle.read().strip().removesuffix(" (deleted)")))
        except OSError:
            pass  # detached meanwhile, or no sysfs: the folder may still name it
    try:
        names += os.listdir(lease_dir)
    except FileNotFoundError:
        pass
    owners = [int(found.group(1)) for found in map(_IMAGE_NAME.fullmatch, names) if found]
    return owners[0] if owners else None


def filesystem_type(path: str) -> str:
    """Type of the file system holding `path` (its longest, latest mount point)."""
    real = os.path.realpath(path)
    best, best_type = "", ""
    for mount_point, kind in _mounts():
        inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, best_type = mount_point, kind
    return best_type


def sweep_stale_disks() -> List[str]:
    """Unmount the workspace images of leases whose owner died without closing them (the image
    names its owner's pid) and delete those lease folders; the mount points swept."""
    swept = []
    for mount_point, _, source in _mount_table():
        if _LEASE_MOUNT.search(mount_point) is None:
            continue
        lease_dir = Path(mount_point).parent
        owner = _owner_pid(lease_dir, source)
        if owner is None or pid_alive(owner):
            continue
        try:
            # Lazy: whatever of the dead owner's still holds a file there cannot keep the sweep waiting.
            _run(["umount", "--lazy", mount_point])
            if lease_dir.exists():
                discard_tree(lease_dir)  # the image with it: its space returns once the mount is gone
        except OSError as error:
            # Every sandbox starting on a node sweeps the same table (a run's 96 sandbox actors at once):
            # one may have read it before another unmounted the image ("umount: not mounted").
            if os.path.ismount(mount_point):
                # Another owner's leftovers are no reason to refuse the lease being made; the next sweep retries.
                log.warning("cannot sweep the workspace image of a dead owner at %s: %s", mount_point, error)
            continue
        swept.append(mount_point)
    return swept


def lease_root(workdir_root: str) -> str:
    """The folder leases live in: sandbox.workdir_root, else the system temporary directory, else
    /var/tmp where that one is memory-backed. ValueError naming the fix for a memory-backed root."""
    if workdir_root:
        kind = filesystem_type(workdir_root)
        if kind in MEMORY_FILESYSTEMS:
            raise ValueError(
                f"sandbox.workdir_root={workdir_root!r} is on {kind} (memory): the agent's files there pin the "
                f"lease's memory limit and the grader's own commands are killed for it; set sandbox.workdir_root "
                f"to a folder on a disk (e.g. {DISK_TEMP_DIR})")
        return workdir_root
    system_temp = tempfile.gettempdir()
    if filesystem_type(system_temp) not in MEMORY_FILESYSTEMS:
        return system_temp
    if os.path.isdir(DISK_TEMP_DIR) and filesystem_type(DISK_TEMP_DIR) not in MEMORY_FILESYSTEMS:
        return DISK_TEMP_DIR
    raise ValueError(f"the system temporary directory {system_temp} and {DISK_TEMP_DIR} are memory-backed: set "
                     f"sandbox.workdir_root to a folder on a disk")


def loop_unavailable_reason() -> Optional[str]:
    """None when a lease can mount its own loop image here, else why not."""
    if os.geteuid() != 0:
        return "not root (mounting a loop image needs root)"
    missing = [tool for tool in ("mkfs.ext4", "mount", "umount") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (e2fsprogs, util-linux)"
    if not os.path.exists("/dev/loop-control"):
        return "no loop devices (/dev/loop-control)"
    return None


def _run(argv: list) -> None:
    """Run a tool of this module; OSError with its output when it fails."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=_TOOL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as error:
        raise OSError(f"{argv[0]} took over {_TOOL_TIMEOUT_S:.0f} s") from error
    if done.returncode != 0:
        raise OSError(f"{' '.join(map(str, argv))} exited {done.returncode}: "
                      f"{done.stdout.decode('utf-8', errors='replace').strip()[-500:]}")


class LoopDisk:
    """An ext4 file system of size_mb in a sparse image, mounted at mount_point (an empty folder).
    Create with `LoopDisk.create`; raises OSError when it cannot be made (nothing left behind)."""

    def __init__(self, image: Path, mount_point: Path, size_mb: int):
        self.image, self.mount_point, self.size_mb = image, mount_point, size_mb
        self.mounted = False

    @classmethod
    def create(cls, image: Path, mount_point: Path, size_mb: int) -> "LoopDisk":
        disk = cls(image, mount_point, size_mb)
        disk._make()
        return disk

    def _make(self) -> None:
        size_bytes = self.size_mb * _MIB
        inodes = min(max(size_bytes // _BYTES_PER_INODE, _MIN_INODES), size_bytes // 1024)
        try:
            with open(self.image, "xb") as handle:
                handle.truncate(size_bytes)  # sparse: the host pays for what is written, up to size_mb
            # No journal and no root reserve: a scratch file system thrown away at every reset.
            _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-N", str(inodes), "-O", "^has_journal",
                  "-E", "nodiscard,lazy_itable_init=1", str(self.image)])
            _run(["mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", str(self.image), str(self.mount_point)])
            self.mounted = True
            os.rmdir(self.mount_point / "lost+found")  # not the task's: the workspace holds only its files
        except OSError:
            self.remove()
            raise

    def wipe(self) -> None:
        """A fresh, empty file system in place of the used one: nothing the agent left is walked."""
        self.remove()
        self._make()

    def remove(self) -> None:
        """Unmount and delete the image; safe to call twice. A mount still busy (a process that
        escaped its cgroup holds a file) is detached lazily: its space returns when that process ends."""
        if self.mounted:
            try:
                _run(["umount", str(self.mount_point)])
            except OSError as error:
                log.warning("umount %s failed (%s): detaching it lazily", self.mount_point, error)
                _run(["umount", "--lazy", str(self.mount_point)])
            self.mounted = False
        try:
            os.unlink(self.image)
        except FileNotFoundError:
            pass  # never made, or removed before


def mount_lease_disk(lease_dir: Path, workspace: Path, disk_mb: int, why_not: Optional[str]) -> Optional[LoopDisk]:
    """The lease's own file system of disk_mb mounted at `workspace` (made here); None where none
    can be mounted (why_not, or the mount failed), with one logged warning: the quota is counted."""
    global _warned_no_loop_disk
    if why_not is None:
        sweep_stale_disks()
        workspace.mkdir()
        try:
            return LoopDisk.create(lease_dir / image_name(os.getpid()), workspace, disk_mb)
        except OSError as error:  # e.g. no free loop device, or a container that may not mount
            workspace.rmdir()
            why_not = str(error)
    if not _warned_no_loop_disk:
        _warned_no_loop_disk = True
        log.warning("no loop image for sandbox.disk_mb (%s): each lease's disk is measured after every "
                    "command instead, and one command can write past the quota within its time limit", why_not)
    return None


def out_of_space(error: OSError) -> bool:
    """Whether a copy failed for want of space (copytree gathers per-file errors in one shutil.Error)."""
    full = (errno.ENOSPC, errno.EDQUOT)
    if isinstance(error, shutil.Error) and error.args and isinstance(error.args[0], list):
        return any(os.strerror(code) in str(why) for *_, why in error.args[0] for code in full)
    return error.errno in full


def over_quota(workspace: Path, disk_mb: int) -> str:
    """How a workspace is over disk_mb ("took N MB, over ..."), "" when it is not (the counted quota)."""
    used_bytes = measure_bytes(workspace, MEASURE_TIMEOUT_S)
    if used_bytes is not None and used_bytes <= disk_mb * _MIB:
        return ""
    used = f"{used_bytes / _MIB:.0f} MB" if used_bytes is not None else f"more than du measures in {MEASURE_TIMEOUT_S:.0f} s"
    return f"took {used}, over its quota sandbox.disk_mb={disk_mb}"


def measure_bytes(path: Path, timeout_s: float) -> Optional[int]:
    """Bytes under `path` on its own file system (`du -sx`, no walk in this process); None when
    du cannot tell within timeout_s (a tree too big to measure in time counts as over any quota)."""
    try:
        done = subprocess.run(["du", "-sx", "--bytes", str(path)], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None
    # du exits 1 when some entry was unreadable (the agent chmod'ed it 000): the total is a floor.
    fields = done.stdout.split()
    return int(fields[0]) if fields and fields[0].isdigit() else None
