"""Run one command on the host (no jail), watched by envs/sandboxes/jail/capture.py, as an ExecResult."""
from __future__ import annotations

import subprocess
import time
from typing import Mapping, Sequence

from envs.sandboxes.jail.capture import watch
from envs.sandboxes.sandbox import ExecResult


def run_process(
    argv: Sequence[str], env: Mapping[str, str], cwd: str, timeout_s: float, max_output_bytes: int
) -> ExecResult:
    """Run argv in a new session; on timeout SIGKILL its whole process group (exit code 124).

    Raises OSError when the process cannot be spawned.
    """
    started_s = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
    )
    with proc.stdout:
        fields = watch(proc, proc.stdout.fileno(), started_s, timeout_s, max_output_bytes)
    return ExecResult(**fields, timeout_s=timeout_s)
