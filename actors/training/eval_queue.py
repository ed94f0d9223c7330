"""EvalQueue: the work source of `swerve eval` (actors/stages/evaluate.py): every (task, attempt) once,
infra errors re-run (bounded), the results kept. Plays the collector's part for the episode actors
(acquire / submit / abandon) and the driver's (progress, results)."""
from __future__ import annotations

import collections
import dataclasses
import random
from typing import Optional, Sequence

from actors.episodes.trajectory import STOP, Trajectory, WorkItem, WorkSource
from envs.outcomes import Outcome


class EvalQueue(WorkSource):
    """Hands out every (task, attempt) once, re-runs infra errors (bounded), keeps the results."""

    def __init__(self, tasks: Sequence, attempts: int, max_infra_retries: int, seed: int):
        rng = random.Random(seed)
        self.pending = collections.deque(
            WorkItem(task, task.id, g, member, 0, 0, rng.randrange(2**31))
            for g, task in enumerate(tasks) for member in range(attempts))
        self.total = len(self.pending)
        self.max_infra_retries = max_infra_retries
        self.in_flight: dict[tuple, WorkItem] = {}
        self.holder: dict[tuple, str] = {}  # who runs each in-flight item (see abandon)
        self.final: list[Trajectory] = []  # one per (task, attempt): scored, or infra after retries
        self.infra_reruns = 0
        self._rng = rng

    def acquire(self, worker: str = "") -> Optional[WorkItem] | str:
        if self.pending:
            item = self.pending.popleft()
            key = (item.group_id, item.member, item.attempt)
            self.in_flight[key], self.holder[key] = item, worker
            return item
        return STOP if not self.in_flight else None

    def abandon(self, worker: str, source: str, reason: str) -> int:
        """The worker died: what it held ends as infra_error(source), re-run like any infra error."""
        keys = [key for key, holder in self.holder.items() if holder == worker]
        for key in keys:
            item = self.in_flight[key]
            self.submit(Trajectory(item.group_id, item.member, item.attempt, item.task_id, item.admitted_version,
                                   outcome=Outcome.INFRA_ERROR.value, infra_source=source, error=reason[:2000]))
        return len(keys)

    def submit(self, traj: Trajectory) -> None:
        key = (traj.group_id, traj.member, traj.attempt)
        item = self.in_flight.pop(key)
        self.holder.pop(key, None)
        if traj.is_infra_error and traj.attempt < self.max_infra_retries:
            self.infra_reruns += 1
            self.pending.appendleft(dataclasses.replace(item, attempt=item.attempt + 1,
                                                        seed=self._rng.randrange(2**31)))
            return
        traj.token_ids, traj.loss_mask, traj.logprobs, traj.versions = [], [], [], []  # not needed here
        self.final.append(traj)

    def progress(self) -> dict:
        scored = [t for t in self.final if not t.is_infra_error]
        return {"done": len(self.final), "total": self.total, "in_flight": len(self.in_flight),
                "infra_reruns": self.infra_reruns, "scored": len(scored),
                "resolved": sum(t.outcome == Outcome.RESOLVED.value for t in scored)}

    def results(self) -> list[Trajectory]:
        return list(self.final)
