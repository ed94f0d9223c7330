"""Run one command on the host (no jail): envs/jail/run_command.py's loop, as an ExecResult."""
from __future__ import annotations

from typing import Mapping, Sequence

from envs.jail.run_command import run_command
from envs.sandbox import ExecResult


def run_process(
    argv: Sequence[str], env: Mapping[str, str], cwd: str, timeout_s: float, max_output_bytes: int
) -> ExecResult:
    """Run argv in a new session; on timeout SIGKILL its whole process group (exit code 124).

    Raises OSError when the process cannot be spawned.
    """
    return ExecResult(**run_command(argv, env, cwd, timeout_s, max_output_bytes), timeout_s=timeout_s)
