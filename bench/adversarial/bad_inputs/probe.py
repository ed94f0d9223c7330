"""One bad-input probe: feed one bad input to the real code path and report how it was met."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

CATEGORIES = ("reply", "command", "task_rows", "config", "model_dir", "port")
# What a probe needs from the host to mean anything; without it the probe is skipped, not failed.
NEEDS = ("", "bwrap", "cgroup")


@dataclass(frozen=True)
class ProbeResult:
    # The input was rejected or contained (an env episode goes on) and a message says so.
    refused: bool
    message: str


@dataclass(frozen=True)
class Probe:
    name: str
    category: str
    run: Callable[[Path], ProbeResult]
    # A fragment the message must contain: what names the problem (and its fix) to the user.
    expected: str
    needs: str = ""

    def __post_init__(self):
        if self.category not in CATEGORIES:
            raise ValueError(f"probe {self.name}: category {self.category!r}; allowed: {CATEGORIES}")
        if self.needs not in NEEDS:
            raise ValueError(f"probe {self.name}: needs {self.needs!r}; allowed: {NEEDS}")


def unavailable_reason(probe: Probe) -> str:
    """"" when the probe can run here, else why not (its isolation is missing on this host)."""
    if probe.needs in ("bwrap", "cgroup") and shutil.which("bwrap") is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    if probe.needs == "cgroup":
        from envs.sandboxes.cgroups import cgroups_unavailable_reason

        # As root RLIMIT_NPROC is not enforced: without a pids cgroup a fork bomb is not contained.
        return cgroups_unavailable_reason() or ""
    return ""
