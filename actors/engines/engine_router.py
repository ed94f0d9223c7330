"""Picks an engine per trajectory: least outstanding work, then sticky (prefix reuse).

An engine whose actor died is skipped; the request that hit it fails as infra_error(engine)
and its group member is re-run elsewhere. The driver replaces a dead engine under the same
name (`engine-<i>`) and pushes the current weights into it; with a `lookup`, the router finds
the replacement by that name and routes to it again (a replacement that has not received
its weights yet holds requests until it has, so it never serves stale weights).
"""
from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

from configs.schema import DeadlinesConfig
from envs.outcomes import InfraError, InfraSource
from policies.sample_types import SampleOutput, SampleRequest

# call(engine, method_name, *args, timeout_s=None) -> result; Ray and in-process callers differ only here.
Call = Callable[..., object]
# lookup(index) -> the engine now registered at that index, or None.
Lookup = Callable[[int], object]


class EngineRouter:
    # How often a dead engine's slot is looked up again.
    REVIVE_INTERVAL_S = 1.0

    def __init__(self, engines: Sequence, call: Call, lookup: Optional[Lookup] = None,
                 generate_timeout_s: float = DeadlinesConfig.generate_s,
                 probe_timeout_s: float = DeadlinesConfig.engine_health_s):
        """generate_timeout_s: deadlines.generate_s; a generate call that outlives it fails as an
        infra error (the engine set finds and replaces the hung engine on its own).
        probe_timeout_s: deadlines.engine_health_s; how long an engine's stats may take when the
        router picks one, and a replacement found by lookup before it is taken."""
        if not engines:
            raise ValueError("no engines: set engine.num_engines >= 1")
        self.engines = list(engines)
        self.call = call
        self.lookup = lookup
        self.generate_timeout_s = generate_timeout_s
        self.probe_timeout_s = probe_timeout_s
        self._sticky: dict[str, int] = {}
        self._outstanding = [0] * len(self.engines)
        self._next_lookup = [0.0] * len(self.engines)
        self.dead: set[int] = set()
        self.revived = 0

    def _call(self, index: int, method: str, *args, timeout_s: float):
        try:
            return self.call(self.engines[index], method, *args, timeout_s=timeout_s)
        except InfraError as err:
            if err.source == InfraSource.ENGINE:
                self.dead.add(index)
            raise

    def _revive(self, index: int) -> bool:
        """Take the engine now registered at `index` (a replacement, or the same one if it answers)."""
        now = time.monotonic()
        if self.lookup is None or now < self._next_lookup[index]:
            return False
        self._next_lookup[index] = now + self.REVIVE_INTERVAL_S
        handle = self.lookup(index)
        if handle is None:
            return False
        try:
            self.call(handle, "stats", timeout_s=self.probe_timeout_s)
        except InfraError:
            return False
        self.engines[index] = handle
        self.dead.discard(index)
        self.revived += 1
        return True

    def _pick(self) -> int:
        loads = []
        for i in range(len(self.engines)):
            if i in self.dead and not self._revive(i):
                continue
            try:
                stats = self._call(i, "stats", timeout_s=self.probe_timeout_s)
            except InfraError:
                continue
            busy = stats["running"] + stats["queued"] + self._outstanding[i]
            loads.append((not stats.get("ready", True), busy, i))
        if not loads:
            raise InfraError(InfraSource.ENGINE, f"all {len(self.engines)} engines are dead")
        return min(loads)[2]

    def generate(self, request: SampleRequest, sticky_key: str) -> SampleOutput:
        index = self._sticky.get(sticky_key)
        if index is None or index in self.dead:
            index = self._sticky[sticky_key] = self._pick()
        self._outstanding[index] += 1
        try:
            return self._call(index, "generate", request, timeout_s=self.generate_timeout_s)
        except InfraError as err:
            if err.source is not InfraSource.TIMEOUT:
                raise
            # Late is the engine's failure (hung, or swamped), never the task's: as infra_error(engine)
            # it re-runs without counting towards the task's quarantine (sample_collector.submit).
            raise InfraError(InfraSource.ENGINE, f"engine-{index} did not answer generate within "
                             f"{self.generate_timeout_s:.0f} s (deadlines.generate_s): {err}") from err
        finally:
            self._outstanding[index] -= 1

    def release(self, sticky_key: str) -> None:
        self._sticky.pop(sticky_key, None)


def local_call(obj, method: str, *args, timeout_s: Optional[float] = None):
    return getattr(obj, method)(*args)
