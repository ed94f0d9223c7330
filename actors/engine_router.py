"""Picks an engine per trajectory: least outstanding work, then sticky (prefix reuse).

An engine whose actor died is skipped from then on; the request that hit it fails as
infra_error(engine) and its group member is re-run elsewhere.
"""
from __future__ import annotations

import random
from typing import Callable, Sequence

from envs.outcomes import InfraError, InfraSource
from policies.sampler import SampleOutput, SampleRequest

# call(engine, method_name, *args) -> result; Ray and in-process callers differ only here.
Call = Callable[..., object]


class EngineRouter:
    def __init__(self, engines: Sequence, call: Call, llm_error_rate: float = 0.0, seed: int = 0):
        if not engines:
            raise ValueError("no engines: set engine.num_engines >= 1")
        self.engines = list(engines)
        self.call = call
        self.llm_error_rate = llm_error_rate  # fault injection (faults.llm_error_rate)
        self._rng = random.Random(seed)
        self._sticky: dict[str, int] = {}
        self._outstanding = [0] * len(self.engines)
        self.dead: set[int] = set()

    def _call(self, index: int, method: str, *args):
        try:
            return self.call(self.engines[index], method, *args)
        except InfraError as err:
            if err.source == InfraSource.ENGINE:
                self.dead.add(index)
            raise

    def _pick(self) -> int:
        loads = []
        for i in range(len(self.engines)):
            if i in self.dead:
                continue
            try:
                stats = self._call(i, "stats")
            except InfraError:
                continue
            loads.append((stats["running"] + stats["queued"] + self._outstanding[i], i))
        if not loads:
            raise InfraError(InfraSource.ENGINE, f"all {len(self.engines)} engines are dead")
        return min(loads)[1]

    def generate(self, request: SampleRequest, sticky_key: str) -> SampleOutput:
        index = self._sticky.get(sticky_key)
        if index is None or index in self.dead:
            index = self._sticky[sticky_key] = self._pick()
        if self.llm_error_rate and self._rng.random() < self.llm_error_rate:
            raise InfraError(InfraSource.ENGINE, "injected LLM call error (faults.llm_error_rate)")
        self._outstanding[index] += 1
        try:
            return self._call(index, "generate", request)
        finally:
            self._outstanding[index] -= 1

    def release(self, sticky_key: str) -> None:
        self._sticky.pop(sticky_key, None)


def local_call(obj, method: str, *args):
    return getattr(obj, method)(*args)
