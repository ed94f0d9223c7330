"""Roles killed (SIGKILL) or hung (SIGSTOP) from outside, as an operator or the OS would, in the
middle of a real run on this process's Ray: what `swerve bench reliability`'s `roles` scenario
and tests/actors/test_supervisor.py do. The run must heal with no human action."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import ray
import ray._private.state as ray_state

# (role, what is hit, signal): the run's answer to each is in actors/supervisor.py.
ROLE_FAULTS = (
    ("collector", "actor", signal.SIGKILL),
    ("trainer-0", "actor", signal.SIGKILL),
    ("trainer-0", "actor", signal.SIGSTOP),
    ("engine-0", "server", signal.SIGKILL),
    ("engine-0", "server", signal.SIGSTOP),
    ("episode-0", "actor", signal.SIGKILL),
)


def actor_pid(namespace: str, name: str) -> int:
    """From the GCS of this process's Ray (the state API would need a dashboard, and several Rays
    may run on this machine)."""
    actor_id = ray.get_actor(name, namespace=namespace)._actor_id.hex()
    return ray_state.actors()[actor_id]["Pid"]


def server_pid(engine_pid: int) -> int:
    """The engine actor's server process (`python -m policies.server`), its child."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:  # the process ended while we looked
            continue
        if ppid == engine_pid and b"policies.server" in cmd:
            return int(entry)
    raise LookupError(f"no server process under engine pid {engine_pid}")


def hit(namespace: str, role: str, target: str, sig: int) -> int:
    """Send `sig` to the role's actor process or (target "server") its engine server; the pid hit."""
    pid = actor_pid(namespace, role)
    if target == "server":
        pid = server_pid(pid)
    os.kill(pid, sig)
    return pid


class AfterFirstStep(threading.Thread):
    """Once the run has written its first metrics row, `act()` runs in this thread (train() runs
    in the caller's); `acted_at` is when it did (time.monotonic()), None until then, and
    `heal_s` the time from the fault to the run's next finished step (its time to heal)."""

    def __init__(self, run_dir: Path, act, timeout_s: float = 300.0):
        super().__init__(daemon=True)
        self.metrics, self.act, self.timeout_s = run_dir / "metrics.jsonl", act, timeout_s
        self.acted_at = None
        self.heal_s = None
        self.start()

    def _rows(self) -> int:
        return len(self.metrics.read_text().splitlines()) if self.metrics.exists() else 0

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            rows = self._rows()
            if rows:
                self.act()
                self.acted_at = time.monotonic()
                break
            time.sleep(0.2)
        while self.acted_at is not None and time.monotonic() < deadline:
            if self._rows() > rows:
                self.heal_s = round(time.monotonic() - self.acted_at, 2)
                return
            time.sleep(0.2)
