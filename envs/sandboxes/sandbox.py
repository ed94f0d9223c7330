"""What every sandbox backend offers: one lease on a fresh copy of a task's workspace."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Mapping, Optional, Protocol, Sequence, runtime_checkable

from envs.tasks.task import Task


# Paths named on one command line inside a sandbox: thousands fit no command line (ARG_MAX).
PATHS_PER_COMMAND = 200


def command_line_chunks(paths: Sequence[str]) -> list[list[str]]:
    """`paths` cut into runs of at most PATHS_PER_COMMAND, one command line each."""
    return [list(paths[start:start + PATHS_PER_COMMAND]) for start in range(0, len(paths), PATHS_PER_COMMAND)]


@dataclass
class ExecResult:
    exit_code: int
    # stdout and stderr merged, decoded as UTF-8 (invalid bytes replaced).
    output: str
    timed_out: bool
    duration_s: float
    # True when the middle of the output was dropped to respect the byte cap.
    output_truncated: bool
    # The time limit the command ran under (the one passed, else sandbox.command_timeout_s).
    timeout_s: float


@runtime_checkable
class Sandbox(Protocol):
    # Whether a lease can hold a task whose repository lives only in its image (task.image):
    # the container backends; the local one copies task.workspace_dir.
    runs_images: bool

    def start(self, task: Task) -> None:
        """Open a lease on a fresh copy of task.workspace_dir, closing any previous lease."""
        ...

    def exec(self, command: str, timeout_s: float | None = None) -> ExecResult:
        """Run a bash command in the workspace; a timeout returns exit code 124."""
        ...

    def read_files(self, paths: Sequence[str]) -> Dict[str, str]:
        """Read files given relative to the workspace (path -> text, UTF-8 with invalid bytes
        replaced); paths escaping it are refused. One round trip for any number of files: grading
        reads a whole change at once."""
        ...

    def write_files(self, files: Mapping[str, str]) -> None:
        """Write files (path relative to the workspace -> text), making their folders; paths
        escaping it are refused. One round trip for any number of files."""
        ...

    def reset(self) -> None:
        """Put the workspace back to the task's initial state."""
        ...

    def close(self) -> None:
        """End the lease and delete the workspace; safe to call twice."""
        ...


@runtime_checkable
class RoutedSandbox(Sandbox, Protocol):
    """A sandbox that can give an agent harness one network route: the gateway's Unix socket
    (envs/sandboxes/gateway_route.py). Kept apart from Sandbox until every wrapper (the warm pool, the
    sandbox actor and its remote lease) passes gateway_dir on."""

    def gateway_dir(self) -> Optional[Path]:
        """Host folder of the open lease, bound read-only into it at gateway_route.GATEWAY_MOUNT,
        where the host listens on gateway_route.GATEWAY_SOCKET_NAME; None where the backend can
        offer no route confined to it (e2b, isolation none). Raises without an open lease."""
        ...
