"""SandboxActor: owns one sandbox lease at a time on the node it was placed on.

The backend comes from a registry of real classes. The driver closes every lease before it
ends the actors, so no workspace outlives its run.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence, get_args

from configs.schema import SandboxBackend, SandboxConfig
from envs.sandboxes.docker_sandbox import DockerSandbox
from envs.sandboxes.e2b_sandbox import E2BSandbox
from envs.sandboxes.local_sandbox import LocalSandbox
from envs.sandboxes.sandbox import ExecResult, RoutedSandbox
from envs.sandboxes.sandbox_pool import BackendFactory, pooled

# sandbox.backend -> what builds it from SandboxConfig, inside a warm pool when sandbox.pool_size > 0.
# Keyed on the SandboxBackend type the config loader checks values against: a new backend is a
# name there and its entry here, and a name without an entry fails on import, not mid-run.
SANDBOX_BACKENDS: Dict[SandboxBackend, BackendFactory] = {
    "local": pooled(LocalSandbox), "e2b": pooled(E2BSandbox), "docker": pooled(DockerSandbox)}
if set(SANDBOX_BACKENDS) != set(get_args(SandboxBackend)):
    raise ImportError(f"SANDBOX_BACKENDS {sorted(SANDBOX_BACKENDS)} != configs.schema.SandboxBackend "
                      f"{sorted(get_args(SandboxBackend))}: give every backend name an entry")


class SandboxActor:
    def __init__(self, index: int, cfg: SandboxConfig):
        if cfg.backend not in SANDBOX_BACKENDS:
            raise ValueError(f"sandbox.backend '{cfg.backend}' is not one of {sorted(SANDBOX_BACKENDS)}")
        self.name = f"sandbox-{index}"
        self.backend = SANDBOX_BACKENDS[cfg.backend](cfg)
        self.leases = 0
        self.start_times_s: list[float] = []

    def start(self, task) -> None:
        t0 = time.perf_counter()
        self.backend.start(task)
        self.start_times_s.append(time.perf_counter() - t0)
        self.leases += 1

    def exec(self, command: str, timeout_s: float | None = None) -> ExecResult:
        return self.backend.exec(command, timeout_s)

    def read_files(self, paths: Sequence[str]) -> Dict[str, str]:
        return self.backend.read_files(paths)

    def write_files(self, files: Mapping[str, str]) -> None:
        self.backend.write_files(files)

    def reset(self) -> None:
        self.backend.reset()

    def gateway_dir(self) -> Optional[Path]:
        return self.backend.gateway_dir() if isinstance(self.backend, RoutedSandbox) else None

    def close(self) -> None:
        self.backend.close()

    def stats(self) -> dict:
        return {"name": self.name, "leases": self.leases, "start_times_s": list(self.start_times_s[-100:])}
