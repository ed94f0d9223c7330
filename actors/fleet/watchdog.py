"""The run-level watchdog: every call between roles has a deadline, but a hang that no single call
sees (an engine that takes requests and never answers while its health probe still passes, an
episode loop stuck outside any call) would otherwise stall a run in silence.

Progress is a scored trajectory finishing (the collector's `buffered + trained + dropped_stale`
passes its highest value so far) or a step completing. Infra errors are not progress: an engine
that fails every call fast (the router finds it silent and counts it dead) keeps episodes busy
failing, and the run would otherwise spin on re-runs forever. When neither happens for deadlines.progress_s while the driver waits for a batch, it
dumps who is waiting on what to the log and heals as for a dead role: a rollback to the newest
checkpoint (actors/fleet/supervisor.py), bounded like every other.
"""
from __future__ import annotations

from typing import Optional

from actors.cluster.roles import RoleFailure


class Watchdog:
    def __init__(self, progress_s: float, now_s: float):
        self.progress_s = progress_s
        self._scored: Optional[int] = None  # the most scored trajectories seen so far
        self._since_s = now_s

    def step_done(self, now_s: float) -> None:
        self._since_s = now_s

    def stalled_s(self, accounting: dict, now_s: float) -> Optional[float]:
        """Seconds without progress once they reach progress_s, else None. Nothing in flight is
        no excuse: the driver is waiting for a batch, and with no work out none can come (tasks
        all quarantined end the run earlier, by name)."""
        scored = accounting["buffered"] + accounting["trained"] + accounting["dropped_stale"]
        if self._scored is None or scored > self._scored:
            self._scored, self._since_s = scored, now_s
            return None
        stalled_s = now_s - self._since_s
        return stalled_s if stalled_s >= self.progress_s else None


def stall_dump(accounting: dict, engines: list[dict], episode_actors: int, stalled_s: float) -> str:
    """Who waits on what, for the log: the driver on the collector's next batch, the collector's
    in-flight work on the episode actors, the episodes on the engines' queues."""
    return "\n".join([f"run stalled: no scored trajectory finished and no step completed for {stalled_s:.0f} s "
                      f"(deadlines.progress_s); rolling back to the newest checkpoint",
                      f"  driver: waiting on collector.next_batch (version {accounting.get('version')})",
                      f"  collector: in_flight={accounting['in_flight']} buffered={accounting['buffered']} "
                      f"admitted={accounting['admitted']} groups_admitted={accounting.get('groups_admitted')}",
                      *_fleet(engines, episode_actors)])


def failure_dump(failure: RoleFailure, engines: list[dict], episode_actors: int) -> str:
    """At every rollback, for the log: the role that failed, the call the driver waited on, and
    the rest of the fleet (the failed role itself is not asked: it may be the one that hangs)."""
    waited = f"{failure.role}.{failure.call}" if failure.call else "progress (deadlines.progress_s)"
    return "\n".join([f"rollback: {failure.role} {failure.cause}", f"  driver: waiting on {waited}",
                      *_fleet(engines, episode_actors)])


def _fleet(engines: list[dict], episode_actors: int) -> list[str]:
    lines = [f"  episode actors: {episode_actors} playing"]
    for engine in engines:
        lines.append("  engine: " + " ".join(f"{key}={value}" for key, value in sorted(engine.items())
                                             if not isinstance(value, (dict, list))))
    return lines
