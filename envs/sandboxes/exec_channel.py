"""The host's end of a lease's exec server (envs/sandboxes/jail/exec_server.py): start it, send it
commands, and end it when it crashed, hung or left the jail dirty.

Starting a jail (bwrap's namespaces and mounts) is most of what a command used to cost; one
server per lease pays it once, and each command is then one fork in the jail.
"""
from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import List, Mapping, Optional, Sequence

from envs.sandboxes.jail.framing import encode_frame, split_frame

JAIL_CODE_DIR = Path(__file__).resolve().parent / "jail"
# Where the jail sees JAIL_CODE_DIR (read-only).
JAIL_CODE_MOUNT = "/run/swerve-exec"
# What a command's reply may take beyond its own timeout: killing and reaping what it left.
REPLY_GRACE_S = 15.0
# How long bwrap may take to exit once its server is killed.
STOP_GRACE_S = 2.0
_READ_CHUNK_BYTES = 1 << 20
_LOG_TAIL_BYTES = 2000


def _children(pid: int) -> List[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(child) for child in handle.read().split()]
    except FileNotFoundError:
        return []  # it exited meanwhile


def _kill(pid: int) -> None:
    """SIGKILL a process (a group, when pid is negative) that may have exited meanwhile."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return


class ExecServerError(Exception):
    """The server crashed, hung or answered out of protocol: an infra error of the sandbox."""



def server_command(python: str, bash: str) -> List[str]:
    # -E -s -S: nothing of the environment, no site: the server needs the standard library only.
    return [python, "-E", "-s", "-S", f"{JAIL_CODE_MOUNT}/exec_server.py", bash]


class ExecServer:
    def __init__(self, argv: Sequence[str], env: Mapping[str, str], cwd: str, cgroup_procs: Sequence[str],
                 log_path: Path):
        # argv ends with server_command(); the fds of cgroup_procs are appended to it.
        self._fds = [os.open(path, os.O_WRONLY) for path in cgroup_procs]
        self._log = open(log_path, "ab")
        try:
            self._proc = subprocess.Popen(
                [*argv, *map(str, self._fds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                env=dict(env), cwd=cwd, start_new_session=True, pass_fds=self._fds,
            )
        except OSError:
            self._close_files()
            raise
        self.log_path = log_path  # the server's stderr
        self._buffer = bytearray()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def run(self, command: str, timeout_s: float, max_output_bytes: int) -> dict:
        """`bash -c command`: ExecResult's fields but timeout_s, and "clean"; raises
        ExecServerError when no proper reply comes."""
        try:
            self._proc.stdin.write(encode_frame([timeout_s, max_output_bytes], command.encode("utf-8")))
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError) as error:
            raise ExecServerError(f"exec server is gone ({self._exit_status()}){self._log_tail()}") from error
        fields, payload = self._read_frame(time.monotonic() + timeout_s + REPLY_GRACE_S)
        if fields == ["error"]:
            raise ExecServerError(payload.decode("utf-8", errors="replace"))
        try:
            exit_code, timed_out, duration_s, truncated, clean = fields
            return {"exit_code": int(exit_code), "output": payload.decode("utf-8", errors="replace"),
                    "timed_out": timed_out == "1", "duration_s": float(duration_s),
                    "output_truncated": truncated == "1", "clean": clean == "1"}
        except ValueError as error:
            raise ExecServerError(f"exec server replied out of protocol: {fields!r}") from error

    def holds_files_in(self, path: str) -> bool:
        """Whether the jail's folder `path` (a mount of its own, which the server's scratch check
        does not enter: /dev/shm) holds anything; read through the server's root from the host.
        A folder that cannot be read counts as holding something."""
        servers = _children(self._proc.pid)  # the server is bwrap's only child, the jail's pid 1
        if len(servers) != 1:
            return True
        try:
            with os.scandir(f"/proc/{servers[0]}/root{path}") as listing:
                return next(listing, None) is not None
        except OSError:
            return True

    def stop(self) -> None:
        """End the jail; safe to call twice. Its pid 1 takes every process of the namespace along.

        The server goes first, by SIGKILL (it holds no state worth a clean exit, and waiting for
        one made every lease switch ~15 ms slower), so that bwrap reaps it and then exits by
        itself: killed together, the server would be left a zombie of an init that may never
        reap it. Only a bwrap that does not exit then gets its group killed.
        """
        if self._proc.poll() is None:
            for pid in _children(self._proc.pid):
                _kill(pid)
            if not self._exited_within(STOP_GRACE_S):
                _kill(-self._proc.pid)
        self._proc.wait()
        # A request the server died before reading stays in stdin's buffer, and close() would flush
        # it into the dead pipe: the bytes have no reader left, so the BrokenPipeError says nothing.
        with contextlib.suppress(BrokenPipeError):
            self._proc.stdin.close()
        self._proc.stdout.close()
        self._close_files()

    def _exited_within(self, timeout_s: float) -> bool:
        try:
            self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _read_frame(self, deadline_s: float) -> tuple:
        poller = select.poll()
        poller.register(self._proc.stdout, select.POLLIN)
        while True:
            try:
                frame = split_frame(bytes(self._buffer))
            except ValueError as error:
                raise ExecServerError(f"exec server replied out of protocol: {error}") from error
            if frame is not None:
                fields, payload, rest = frame
                self._buffer = bytearray(rest)
                return fields, payload
            remaining_s = deadline_s - time.monotonic()
            if remaining_s <= 0:
                raise ExecServerError(f"exec server did not answer in time{self._log_tail()}")
            if not poller.poll(remaining_s * 1000):
                continue
            chunk = os.read(self._proc.stdout.fileno(), _READ_CHUNK_BYTES)
            if not chunk:
                raise ExecServerError(f"exec server is gone ({self._exit_status()}){self._log_tail()}")
            self._buffer += chunk

    def _log_tail(self) -> str:
        """What the server wrote to stderr (a traceback, bwrap's complaint), for the error: the
        log itself goes with the lease."""
        self._log.flush()
        with open(self.log_path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - _LOG_TAIL_BYTES))
            tail = handle.read().decode("utf-8", errors="replace").strip()
        return f"; its stderr: {tail}" if tail else ""

    def _exit_status(self) -> str:
        try:
            code: Optional[int] = self._proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "still running"
        return f"exit status {code}"

    def _close_files(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        self._log.close()
