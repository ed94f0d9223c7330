"""Picks an engine per trajectory: least outstanding work, then sticky (prefix reuse)."""
from __future__ import annotations

from typing import Callable, Sequence

from policies.sampler import SampleOutput, SampleRequest

# call(engine, method_name, *args) -> result; Ray and in-process callers differ only here.
Call = Callable[..., object]


class EngineRouter:
    def __init__(self, engines: Sequence, call: Call):
        if not engines:
            raise ValueError("no engines: set engine.num_engines >= 1")
        self.engines = list(engines)
        self.call = call
        self._sticky: dict[str, int] = {}
        self._outstanding = [0] * len(self.engines)

    def _pick(self) -> int:
        loads = []
        for i, engine in enumerate(self.engines):
            stats = self.call(engine, "stats")
            loads.append((stats["running"] + stats["queued"] + self._outstanding[i], i))
        return min(loads)[1]

    def generate(self, request: SampleRequest, sticky_key: str) -> SampleOutput:
        index = self._sticky.get(sticky_key)
        if index is None:
            index = self._sticky[sticky_key] = self._pick()
        self._outstanding[index] += 1
        try:
            return self.call(self.engines[index], "generate", request)
        finally:
            self._outstanding[index] -= 1

    def release(self, sticky_key: str) -> None:
        self._sticky.pop(sticky_key, None)


def local_call(obj, method: str, *args):
    return getattr(obj, method)(*args)
