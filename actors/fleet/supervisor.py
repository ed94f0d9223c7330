"""The driver's supervisor: a role that dies or stops answering is repaired without a human.

Engines, episode actors and sandboxes are replaced where they die (EngineSet, launch.reap_episodes,
SandboxLease), without stopping the run. The collector and the trainer shards hold the run's
state (the books, the weights and optimizer): when one of them dies or misses its deadline
(configs `deadlines.*`; its handle in actors/cluster/roles.py raises RoleFailure naming it), the driver
ends the fleet, builds a new one under the same names and rolls back to the newest complete checkpoint (or to the start when there is none yet), so the
books and the weights agree again and the version count continues from the checkpoint's. The
work done since that checkpoint is redone: at most trainer.checkpoint_every_s of it.
Rollbacks are bounded (run.max_restarts per role, run.max_restarts_total in all).
"""
from __future__ import annotations

import time
from collections import Counter
from typing import Optional

from actors.cluster.roles import RoleFailure
from actors.report import console
from configs.schema import RunConfig


class RunAborted(RuntimeError):
    """Past the restart bounds: a human is needed (the message says what to run)."""


def role_kind(role: str) -> str:
    """'trainer-1' -> 'trainer': restarts are bounded and counted by kind of role."""
    return role.rsplit("-", 1)[0] if role.rsplit("-", 1)[-1].isdigit() else role


class Supervisor:
    """Counts restarts by role, enforces the bounds and remembers how long each heal took."""

    def __init__(self, cfg: RunConfig, resume_command: str):
        self.cfg = cfg
        self.resume_command = resume_command
        self.rollbacks: Counter = Counter()  # by kind of role: collector, trainer, run (the watchdog's)
        self.replaced: Counter = Counter()  # engines and episode actors of fleets already ended
        self.heal_s: dict[str, list[float]] = {}
        self._failed_at: Optional[tuple[str, float]] = None

    def failed(self, failure: RoleFailure) -> None:
        """Record a rollback, or raise RunAborted past the bounds."""
        kind = role_kind(failure.role)
        self.rollbacks[kind] += 1
        total = sum(self.rollbacks.values())
        if self.rollbacks[kind] > self.cfg.max_restarts or total > self.cfg.max_restarts_total:
            raise RunAborted(
                f"{failure.role} failed again ({failure.cause}) after {self.rollbacks[kind] - 1} restarts of "
                f"{kind} ({total - 1} in all; bounds run.max_restarts={self.cfg.max_restarts}, "
                f"run.max_restarts_total={self.cfg.max_restarts_total}). Fix the cause, then continue from the "
                f"newest checkpoint with: {self.resume_command}") from failure
        self._failed_at = (kind, time.monotonic())
        console.warn(f"{failure.role} {failure.cause}: rolling back to the newest checkpoint "
                     f"(restart {self.rollbacks[kind]}/{self.cfg.max_restarts} of {kind})")

    def healed(self) -> None:
        """The rebuilt fleet finished a step: the time since the failure is that role's heal time."""
        if self._failed_at is not None:
            kind, since = self._failed_at
            self.heal_s.setdefault(kind, []).append(round(time.monotonic() - since, 2))
            self._failed_at = None

    def fleet_ended(self, engine_restarts: int, episode_replacements: int) -> None:
        self.replaced["engine"] += engine_restarts
        self.replaced["episode"] += episode_replacements

    def restarts(self, engine_restarts: int = 0, episode_replacements: int = 0) -> dict:
        """Restarts so far by kind of role (the live fleet's replacements included)."""
        counts = Counter(self.rollbacks) + self.replaced + Counter(engine=engine_restarts, episode=episode_replacements)
        return {kind: counts.get(kind, 0) for kind in ("collector", "trainer", "engine", "episode", "run")}
