"""Roles killed (SIGKILL) or hung (SIGSTOP) from outside, as an operator or the OS would, in the
middle of a real run on this process's Ray: what `swerve bench reliability`'s `roles` scenario
and tests/actors/fleet/test_supervisor.py do. The run must heal with no human action."""
from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import ray
import ray._private.state as ray_state

# (role, what is hit, signal): the run's answer to each is in actors/fleet/supervisor.py.
ROLE_FAULTS = (
    ("collector", "actor", signal.SIGKILL),
    ("trainer-0", "actor", signal.SIGKILL),
    ("trainer-0", "actor", signal.SIGSTOP),
    ("engine-0", "server", signal.SIGKILL),
    ("engine-0", "server", signal.SIGSTOP),
    ("episode-0", "actor", signal.SIGKILL),
    ("sandbox-0", "actor", signal.SIGKILL),
    ("sandbox-0", "actor", signal.SIGSTOP),
    ("sandbox-0", "command", signal.SIGSTOP),
)


def actor_pid(namespace: str, name: str) -> int:
    """From the GCS of this process's Ray (the state API would need a dashboard, and several Rays
    may run on this machine)."""
    actor_id = ray.get_actor(current_name(namespace, name), namespace=namespace)._actor_id.hex()
    return ray_state.actors()[actor_id]["Pid"]


def current_name(namespace: str, name: str) -> str:
    """The live actor that plays role `name` now: the run replaces a dead or hung actor under a
    suffixed name (a sandbox's `-r<N>`, a replaced episode's `-g<N>`), so `sandbox-0` may already
    be `sandbox-0-r1` when the fault comes, through no fault of the test."""
    pattern = re.compile(re.escape(name) + r"((?:-[rg]\d+)*)")
    live = {}
    for actor in ray.util.list_named_actors(all_namespaces=True):
        match = pattern.fullmatch(actor["name"]) if actor["namespace"] == namespace else None
        if match:
            live[actor["name"]] = tuple(int(n) for n in re.findall(r"\d+", match.group(1)))
    if not live:
        raise LookupError(f"no live actor plays {name} in namespace {namespace}")
    return max(live, key=live.get)


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:  # the process ended while we looked
            continue
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def descendants(pid: int) -> list[int]:
    tree, found, todo = _children(), [], [pid]
    while todo:
        kids = tree.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def server_pid(engine_pid: int) -> int:
    """The engine actor's server process (`python -m policies.server`), its child."""
    for pid in _children().get(engine_pid, []):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"policies.server" in f.read():
                    return pid
        except OSError:
            continue
    raise LookupError(f"no server process under engine pid {engine_pid}")


def hit_command(sandbox_pid: int, sig: int, wait_s: float = 120.0) -> int:
    """Send `sig` to every process of the next command the sandbox actor runs (its descendants:
    sh, the jail, the agent's or the grader's processes); the first pid hit."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        pids = descendants(sandbox_pid)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:  # it ended first
                continue
        if pids:
            return pids[0]
        time.sleep(0.005)
    raise LookupError(f"sandbox pid {sandbox_pid} ran no command for {wait_s:.0f} s")


def hit(namespace: str, role: str, target: str, sig: int) -> int:
    """Send `sig` to the role's actor process, its engine server (target "server") or the
    command its sandbox runs (target "command"); the pid hit."""
    pid = actor_pid(namespace, role)
    if target == "server":
        pid = server_pid(pid)
    elif target == "command":
        return hit_command(pid, sig)
    os.kill(pid, sig)
    return pid


class AfterStep(threading.Thread):
    """Once the run has written `step` metrics rows and `ready()` holds, `act()` runs in this
    thread (train() runs in the caller's); `acted_at` is when it did (time.monotonic()), None
    until then, and `heal_s` the time from the fault to the run's next finished step beyond
    those (its time to heal, including any steps it re-ran after a rollback)."""

    def __init__(self, run_dir: Path, act, step: int = 1, ready=lambda: True, timeout_s: float = 900.0):
        super().__init__(daemon=True)
        self.metrics, self.act, self.step, self.ready = run_dir / "metrics.jsonl", act, step, ready
        self.timeout_s = timeout_s
        self.acted_at = None
        self.heal_s = None
        self.start()

    def _rows(self) -> int:
        return len(self.metrics.read_text().splitlines()) if self.metrics.exists() else 0

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            rows = self._rows()
            if rows >= self.step and self.ready():
                self.act()
                self.acted_at = time.monotonic()
                break
            time.sleep(0.2)
        while self.acted_at is not None and time.monotonic() < deadline:
            if self._rows() > rows:
                self.heal_s = round(time.monotonic() - self.acted_at, 2)
                return
            time.sleep(0.2)
