"""The exec server: one long-lived process per lease inside its jail, starting each command fresh.

It runs as pid 1 of the jail's pid namespace (bwrap --as-pid-1). A command is a new process
(posix_spawn: no fork of the server), in its own session, with the environment and cwd the
server started with, its output capped while it streams, and its timeout enforced here. After
each command everything else in the namespace is killed and reaped, so nothing a command starts
outlives it, also what left its process group. Pid 1 of a namespace receives no signal from
inside it that it has no handler for, and the server is not dumpable, so a command can neither
kill it nor open its pipes.

Protocol (framing.py): a request is the header "<timeout_s> <max_output_bytes>" and the command,
run as `bash -c command`; a reply is the header "<exit_code> <timed_out> <duration_s>
<output_truncated> <clean>" and the output, or the header "error" and why the command could
not start. clean is 0 when the command left something in the jail's scratch space (/tmp, /dev,
SysV IPC): the host then starts a fresh jail for the next command.
Arguments: bash's path, then the fds of cgroup.procs files (the host opened them, so the
server itself stays out of the lease's cgroup). Each command's bash joins them first, through
BASH_ENV (join_cgroups.bash), before it runs anything of the command.
Imports stay few and fast (no json, subprocess or signal): the server's start is part of every
lease's start.
"""
from __future__ import annotations

import _signal  # the C module: `signal` would import enum, ~7 ms of every lease's start
import ctypes
import fcntl
import os
import sys
import time
from stat import S_ISDIR as _S_ISDIR, S_ISLNK as _S_ISLNK

from capture import SIGKILL, kill_group, watch
from framing import read_frame, write_frame

_PR_SET_DUMPABLE = 4
_SCRATCH_ROOTS = (b"/tmp", b"/dev")
# Beyond these the scratch space is dirty without looking further: listing it stays cheap.
_SCRATCH_MAX_ENTRIES = 10_000
_SCRATCH_MAX_DEPTH = 64
_SYSV_TABLES = ("/proc/sysvipc/shm", "/proc/sysvipc/msg", "/proc/sysvipc/sem")
_JOIN_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "join_cgroups.bash")
# Where join_cgroups.bash finds the cgroup fds (at most three: v1's pids, memory and freezer).
_CGROUP_FDS = (7, 8, 9)


class Spawned:
    """A command started by posix_spawn, as watch sees a process."""

    def __init__(self, pid: int):
        self.pid = pid
        self._returncode = None

    def poll(self):
        if self._returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._returncode = os.waitstatus_to_exitcode(status)
        return self._returncode

    def wait(self) -> int:
        if self._returncode is None:
            self._returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self._returncode


def kill_everything_else(pgid: int) -> None:
    """SIGKILL every other process of the namespace (kill(-1) from its pid 1 reaches them all)."""
    kill_group(pgid)
    try:
        os.kill(-1, SIGKILL)
    except ProcessLookupError:
        return  # nothing else is alive


def reap_all() -> None:
    """Wait until no process but this one is left: every process here is its descendant."""
    while True:
        try:
            os.kill(-1, SIGKILL)
        except ProcessLookupError:
            pass  # only zombies may be left: reap them
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def scratch_listing(root: bytes):
    """Every path under root with its link target, not descending into mounts: bwrap's binds
    (a venv that lives under /tmp, the device nodes, /dev/pts) are not scratch space. None when
    it cannot be told within the bounds (entries, depth) or an entry cannot be read: a jail that
    cannot be listed counts as dirty. Iterative, on bytes (any name), and it never raises."""
    entries = []
    try:
        stack = [(root, os.lstat(root).st_dev, 0)]
        while stack:
            folder, device, depth = stack.pop()
            with os.scandir(folder) as listing:
                for item in listing:
                    if len(entries) >= _SCRATCH_MAX_ENTRIES:
                        return None
                    info = item.stat(follow_symlinks=False)
                    is_link = _S_ISLNK(info.st_mode)
                    entries.append((item.path, os.readlink(item.path) if is_link else b""))
                    if _S_ISDIR(info.st_mode) and info.st_dev == device:
                        if depth + 1 >= _SCRATCH_MAX_DEPTH:
                            return None
                        stack.append((item.path, device, depth + 1))
    except OSError:
        return None  # made unreadable, too long a path, gone meanwhile: dirty either way
    return sorted(entries)


def sysv_objects() -> int:
    count = 0
    for table in _SYSV_TABLES:
        try:
            with open(table) as handle:
                count += max(0, len(handle.readlines()) - 1)  # a header line, then one per object
        except FileNotFoundError:
            continue
    return count


def jail_clean(at_start: list) -> bool:
    """Whether the scratch space is as bwrap made it (None, unlistable, never is)."""
    now = [scratch_listing(root) for root in _SCRATCH_ROOTS]
    if None in now or now != at_start:
        return False
    try:
        return not sysv_objects()
    except OSError:
        return False


def run(bash: str, command: str, env: dict, timeout_s: float, max_output_bytes: int) -> dict:
    started_s = time.monotonic()
    out_read, out_write = os.pipe()
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        pid = os.posix_spawn(bash, [bash, "-c", command], env, setsid=True, file_actions=[
            (os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, out_write, 1),
            (os.POSIX_SPAWN_DUP2, out_write, 2)])
    finally:
        os.close(out_write)
        os.close(devnull)
    try:
        return watch(Spawned(pid), out_read, started_s, timeout_s, max_output_bytes, kill_rest=kill_everything_else)
    finally:
        os.close(out_read)


def serve(bash: str, cgroup_fds: tuple) -> None:
    env = dict(os.environ)
    if cgroup_fds:
        env["BASH_ENV"] = _JOIN_SCRIPT
    # What bwrap made: compared after every command (/tmp holds the binds of a venv under /tmp).
    at_start = [scratch_listing(root) for root in _SCRATCH_ROOTS]
    while True:
        frame = read_frame(sys.stdin.buffer)
        if frame is None:
            return  # the host closed the channel
        (timeout_s, max_output_bytes), command = frame
        try:
            reply = run(bash, command.decode("utf-8", errors="replace"), env, float(timeout_s), int(max_output_bytes))
        except OSError as error:
            reap_all()
            write_frame(sys.stdout.buffer, ["error"], f"cannot start the command: {error}".encode())
            continue
        reap_all()
        clean = jail_clean(at_start)
        header = [reply["exit_code"], int(reply["timed_out"]), reply["duration_s"], int(reply["output_truncated"]),
                  int(clean)]
        write_frame(sys.stdout.buffer, header, reply["output"].encode("utf-8", errors="replace"))


def main() -> None:
    if os.getpid() != 1:
        # Its kill(-1) ends every process it may signal: only a namespace of its own bounds that.
        raise SystemExit("exec_server.py runs only as pid 1 of its own pid namespace (bwrap --as-pid-1)")
    # As pid 1 with default dispositions, no signal from inside the jail reaches the server
    # (Python itself installs a handler for SIGINT only).
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
    ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    bash, given = sys.argv[1], [int(arg) for arg in sys.argv[2:]]
    if len(given) > len(_CGROUP_FDS):
        raise SystemExit(f"at most {len(_CGROUP_FDS)} cgroup fds, got {given}")
    fds = _CGROUP_FDS[:len(given)]
    # Through fds above any target first, so that no move overwrites a source still to move.
    lifted = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100) for fd in given]
    for fd in given:
        os.close(fd)
    for source, target in zip(lifted, fds):
        os.dup2(source, target)  # inheritable: each command's bash joins and closes them
        os.close(source)
    serve(bash, fds)


if __name__ == "__main__":
    main()
