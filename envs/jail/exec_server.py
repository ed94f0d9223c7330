"""The exec server: one long-lived process per lease inside its jail, starting each command fresh.

It runs as pid 1 of the jail's pid namespace (bwrap --as-pid-1). A command is a new process,
in its own session, with the environment and cwd the server started with, its output capped
while it streams, and its timeout enforced here. After each command everything else in the
namespace is killed and reaped, so nothing a command starts outlives it, also what left its
process group. Pid 1 of a namespace receives no signal from inside it that it has no handler
for, and the server is not dumpable, so a command can neither kill it nor open its pipes.

Protocol, one JSON object per line. stdin: {"command", "timeout_s", "max_output_bytes"}, run
as `bash -c command`. stdout: run_command's fields plus "clean" (False when the command left
something in the jail's scratch space, /tmp, /dev or SysV IPC: the host then starts a fresh
jail for the next command), or {"error": "..."} when the command could not be started.
Arguments: bash's path, then the fds of cgroup.procs files (the host opened them, so the
server itself stays out of the lease's cgroup). Each command's bash joins them first, through
BASH_ENV (join_cgroups.bash): Python code in the child would cost a fork instead of a vfork,
about 2 ms, and a wrapping sh another 0.6 ms.
"""
from __future__ import annotations

import ctypes
import fcntl
import json
import os
import signal
import sys

from run_command import kill_group, run_command

_PR_SET_DUMPABLE = 4
_SCRATCH_DIR = "/tmp"
_DEV_DIR = "/dev"
_SYSV_TABLES = ("/proc/sysvipc/shm", "/proc/sysvipc/msg", "/proc/sysvipc/sem")
_JOIN_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "join_cgroups.bash")
# Where join_cgroups.bash finds the cgroup fds (at most three: v1's pids, memory and freezer).
_CGROUP_FDS = (7, 8, 9)


def kill_everything_else(pgid: int) -> None:
    """SIGKILL every other process of the namespace (kill(-1) from its pid 1 reaches them all)."""
    kill_group(pgid)
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        return  # nothing else is alive


def reap_all() -> None:
    """Wait until no process but this one is left: every process here is its descendant."""
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass  # only zombies may be left: reap them
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def dev_listing() -> list:
    entries = []
    for root, dirs, files in os.walk(_DEV_DIR):
        for name in dirs + files:
            path = os.path.join(root, name)
            entries.append((path, os.readlink(path) if os.path.islink(path) else ""))
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


def serve(bash: str, cgroup_fds: tuple) -> None:
    env = dict(os.environ)
    if cgroup_fds:
        env["BASH_ENV"] = _JOIN_SCRIPT
    cwd = os.getcwd()
    dev_at_start = dev_listing()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            reply = run_command([bash, "-c", request["command"]], env, cwd, request["timeout_s"],
                                request["max_output_bytes"], kill_rest=kill_everything_else, pass_fds=cgroup_fds)
        except OSError as error:
            reply = {"error": f"cannot start the command: {error}"}
        reap_all()
        reply["clean"] = not os.listdir(_SCRATCH_DIR) and dev_listing() == dev_at_start and not sysv_objects()
        sys.stdout.buffer.write(json.dumps(reply).encode() + b"\n")
        sys.stdout.buffer.flush()


def main() -> None:
    if os.getpid() != 1:
        # Its kill(-1) ends every process it may signal: only a namespace of its own bounds that.
        raise SystemExit("exec_server.py runs only as pid 1 of its own pid namespace (bwrap --as-pid-1)")
    # As pid 1 with default dispositions, no signal from inside the jail reaches the server.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    bash, given = sys.argv[1], [int(arg) for arg in sys.argv[2:]]
    if len(given) > len(_CGROUP_FDS):
        raise SystemExit(f"at most {len(_CGROUP_FDS)} cgroup fds, got {given}")
    fds = _CGROUP_FDS[:len(given)]
    # Through fds above any target first, so that no move overwrites a source still to move.
    lifted = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100) for fd in given]
    for fd in given:
        os.close(fd)
    for source, target in zip(lifted, fds):
        os.dup2(source, target, inheritable=False)
        os.close(source)
    serve(bash, fds)


if __name__ == "__main__":
    main()
