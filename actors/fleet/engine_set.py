"""The run's engines as one set: start, replace the dead under their names, push weights, stats."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Optional

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from actors.cluster.placement import Placement
from actors.fleet.remote import create_engine
from actors.cluster.roles import wait
from actors.cluster.roles import RoleFailure
from configs.schema import DeadlinesConfig, EngineConfig

log = logging.getLogger("swerve")


@dataclass
class EngineSet:
    """The run's engines, named `engine-<i>`; a dead one is replaced under its name and gets the
    current weights before it serves (routers find it by name, see EngineRouter)."""

    cfg: EngineConfig
    model_path: str
    namespace: str
    placement: Optional[Placement] = None  # the run's GPUs and role resources; None: anywhere
    deadlines: DeadlinesConfig = field(default_factory=DeadlinesConfig)
    handles: list = field(default_factory=list)
    version: int = 0
    weights: object = None  # ObjectRef of the current weights (safetensors bytes); None: the checkpoint at model_path
    restarts: int = 0
    _next_check: float = 0.0
    _misses: dict = field(default_factory=dict)  # engine index -> health probes missed in a row

    def start(self) -> "EngineSet":
        self.handles = [create_engine(self.cfg, i, self.model_path, self.namespace, options=self._options(i),
                                      deadlines=self.deadlines)
                        for i in range(self.cfg.num_engines)]
        return self

    def _options(self, index: int) -> dict:
        # A replacement takes its predecessor's bundle: the same GPUs, freed by its death.
        return self.placement.options("engine", index) if self.placement else {}

    def _replace(self, index: int) -> None:
        ray.kill(self.handles[index])  # dead or hung: ends it and frees its name sooner
        deadline = time.monotonic() + self.deadlines.engine_replace_s
        while True:  # the dead actor's name is released asynchronously
            try:
                handle = create_engine(self.cfg, index, self.model_path, self.namespace,
                                       wait_for_weights=self.weights is not None, options=self._options(index),
                                       deadlines=self.deadlines)
                break
            except ValueError as err:
                if time.monotonic() > deadline:
                    raise RoleFailure(f"engine-{index}", f"its name was not free for a replacement within "
                                      f"{self.deadlines.engine_replace_s:.0f} s (deadlines.engine_replace_s)") from err
                time.sleep(0.2)
        if self.weights is not None:
            wait([handle.update_weights.remote(self.weights, self.version)], [f"engine-{index}"],
                 self.deadlines.weight_sync_s, "update_weights")
        self.handles[index] = handle
        self.restarts += 1
        print(f"[swerve] engine-{index} died; replaced, serving v{self.version}", flush=True)

    def _hung(self, indices: list[int]) -> list[int]:
        """Probe these engines' health once: those dead, or past deadlines.engine_health_misses
        unanswered probes of deadlines.engine_health_s in a row (a stopped or wedged server or
        actor; one miss may be a server slow under load, not a hung one)."""
        health_s = self.deadlines.engine_health_s
        answers = _gather([self.handles[i].ping.remote(health_s) for i in indices], 2 * health_s)
        hung = []
        for i, answered in zip(indices, answers):
            if isinstance(answered, RayActorError):
                hung.append(i)
                continue
            self._misses[i] = 0 if answered is True else self._misses.get(i, 0) + 1
            if self._misses[i] >= self.deadlines.engine_health_misses:
                log.warning("engine-%d did not answer %d health probes of %.0f s in a row (hung); replacing it",
                            i, self._misses[i], health_s)
                hung.append(i)
        return hung

    def replace_dead(self) -> list[int]:
        """Probe every engine; replace the dead and the hung ones (with the current weights).
        Returns the indices replaced."""
        dead = self._hung(list(range(len(self.handles))))
        for i in dead:
            self._replace(i)
        self._next_check = time.monotonic() + self.cfg.health_interval_s
        return dead

    def maybe_replace_dead(self) -> list[int]:
        return self.replace_dead() if time.monotonic() >= self._next_check else []

    def sync(self, weights_ref, version: int) -> list[int]:
        """Every engine serves `version` when this returns. While the updates run, the engines still
        updating are probed every engine.health_interval_s: a dead or hung one (or one past
        deadlines.weight_sync_s) is replaced, and the replacement gets these weights first."""
        self.weights, self.version = weights_ref, version
        pending = {h.update_weights.remote(weights_ref, version): i for i, h in enumerate(self.handles)}
        deadline = time.monotonic() + self.deadlines.weight_sync_s
        versions: list = [None] * len(self.handles)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=self.cfg.health_interval_s)
            replace = []
            for ref in done:
                i = pending.pop(ref)
                try:
                    versions[i] = ray.get(ref, timeout=0)  # done: it waits for nothing
                except RayActorError:
                    replace.append(i)
            if pending:
                late = time.monotonic() > deadline
                if late:
                    log.warning("weight update not done within %.0f s on engines %s (hung); replacing them",
                                self.deadlines.weight_sync_s, sorted(pending.values()))
                hung = set(pending.values()) if late else set(self._hung(sorted(pending.values())))
                for ref, i in list(pending.items()):
                    if i in hung:
                        pending.pop(ref)
                        replace.append(i)
            for i in replace:
                self._misses[i] = 0
                self._replace(i)  # pushes self.weights before the replacement serves
                versions[i] = self.version
        return versions

    def stats(self, reset_peak: bool = False) -> list[dict]:
        # Asked all at once, under one deadline: a rollback's dump with many hung engines waits
        # one probe, not one per engine. Dead or hung ones are shown so; the next probe replaces them.
        answers = _gather([h.stats.remote(reset_peak) for h in self.handles], self.deadlines.engine_health_s)
        return [{"index": i, "dead": True, "kv_usage_peak": 0.0, "tokens_per_s": 0.0, "busy_fraction": 0.0,
                 "weight_update_s": 0.0} if isinstance(answer, Exception) else answer
                for i, answer in enumerate(answers)]


def _gather(refs: list, timeout_s: float) -> list:
    """Each ref's value, all within one deadline; a dead actor's slot holds its RayActorError and
    a late one's its GetTimeoutError (the caller decides what each means)."""
    deadline = time.monotonic() + timeout_s
    answers = []
    for ref in refs:
        try:
            answers.append(ray.get(ref, timeout=max(0.0, deadline - time.monotonic())))
        except (RayActorError, GetTimeoutError) as error:
            answers.append(error)
    return answers
