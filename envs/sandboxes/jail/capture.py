"""Watch one started command: its output capped while it streams, its deadline, what it leaves.

Standard library only, and only what starts fast (os, select, time): the host watches unjailed
commands with it (envs/sandboxes/process.py) and the jail's exec server every command it starts, and the
server's start is part of every lease's start.
"""
from __future__ import annotations

import os
import select
import time

TYPE_CHECKING = False  # typing itself costs the jail ~15 ms of start
if TYPE_CHECKING:
    from typing import Callable, Optional

TIMEOUT_EXIT_CODE = 124
# SIGKILL's number on Linux: the signal module would cost the jail an enum import.
SIGKILL = 9
_READ_CHUNK_BYTES = 65536
# How often the loop looks at the process while output is quiet.
_POLL_INTERVAL_S = 0.05


class CappedOutput:
    """Keeps the first and last max_bytes/2 bytes of a stream and counts what fell in between."""

    def __init__(self, max_bytes: int):
        self.head_limit_bytes = max_bytes // 2
        self.tail_limit_bytes = max_bytes - self.head_limit_bytes
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped_bytes = 0

    def add(self, chunk: bytes) -> None:
        room = self.head_limit_bytes - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        excess = len(self.tail) - self.tail_limit_bytes
        if excess > 0:
            del self.tail[:excess]
            self.dropped_bytes += excess

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if not self.dropped_bytes:
            return head + tail
        return f"{head}\n[... {self.dropped_bytes} bytes of output elided ...]\n{tail}"


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, SIGKILL)
    except ProcessLookupError:
        # The whole group already exited: nothing is left to kill.
        return


def watch(proc, out_fd: int, started_s: float, timeout_s: float, max_output_bytes: int,
          kill_rest: Callable[[int], None] = kill_group) -> dict:
    """Capture a started process's merged output from out_fd until it ends. proc: what a Popen
    offers of pid, poll() -> Optional[int] and wait() -> int; the process leads its own group. On its timeout (exit code 124) and once it exits, `kill_rest(pgid)` ends
    what it left (background children would hold the pipe open). Returns ExecResult's fields
    but timeout_s; the caller closes out_fd."""
    deadline_s = started_s + timeout_s
    captured = CappedOutput(max_output_bytes)
    timed_out = False
    stragglers_killed = False
    poller = select.poll()
    poller.register(out_fd, select.POLLIN)
    while True:
        remaining_s = deadline_s - time.monotonic()
        if remaining_s <= 0:
            timed_out = True
            kill_rest(proc.pid)
            break
        if poller.poll(min(remaining_s, _POLL_INTERVAL_S) * 1000):
            chunk = os.read(out_fd, _READ_CHUNK_BYTES)
            if not chunk:
                break
            captured.add(chunk)
        if not stragglers_killed and proc.poll() is not None:
            kill_rest(proc.pid)
            stragglers_killed = True
    exit_code = proc.wait()
    if timed_out:
        exit_code = TIMEOUT_EXIT_CODE
    elif exit_code < 0:
        exit_code = 128 - exit_code  # shell convention for "killed by signal N"
    return {
        "exit_code": exit_code,
        "output": captured.text(),
        "timed_out": timed_out,
        "duration_s": time.monotonic() - started_s,
        "output_truncated": captured.dropped_bytes > 0,
    }
