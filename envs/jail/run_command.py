"""Run one command as its own process group with a deadline and a memory-bounded output capture.

Standard library only: the host runs it for unjailed commands and the jail's exec server
(exec_server.py) runs it for each command it starts.
"""
from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from typing import Callable, Mapping, Sequence

TIMEOUT_EXIT_CODE = 124
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
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        # The whole group already exited: nothing is left to kill.
        return


def run_command(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str,
    timeout_s: float,
    max_output_bytes: int,
    kill_rest: Callable[[int], None] = kill_group,
    pass_fds: Sequence[int] = (),
) -> dict:
    """Run argv in a new session; on timeout (exit code 124) and once it exits, `kill_rest(pgid)`
    ends what it left. Returns ExecResult's fields but timeout_s.

    Raises OSError when the process cannot be spawned.
    """
    started_s = time.monotonic()
    # No preexec_fn: it would make Popen fork instead of vfork, about 2 ms more per command.
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )
    deadline_s = started_s + timeout_s
    captured = CappedOutput(max_output_bytes)
    timed_out = False
    stragglers_killed = False
    with proc.stdout, selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while True:
            remaining_s = deadline_s - time.monotonic()
            if remaining_s <= 0:
                timed_out = True
                kill_rest(proc.pid)
                break
            if selector.select(min(remaining_s, _POLL_INTERVAL_S)):
                chunk = os.read(proc.stdout.fileno(), _READ_CHUNK_BYTES)
                if not chunk:
                    break
                captured.add(chunk)
            if not stragglers_killed and proc.poll() is not None:
                # Background children of a finished command would hold the pipe open.
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
