"""The run's engines as one set: start, replace the dead under their names, push weights, stats."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from actors.remote import create_engine
from configs.schema import DeadlinesConfig, EngineConfig

log = logging.getLogger("swerve")


@dataclass
class EngineSet:
    """The run's engines, named `engine-<i>`; a dead one is replaced under its name and gets the
    current weights before it serves (routers find it by name, see EngineRouter)."""

    cfg: EngineConfig
    model_path: str
    namespace: str
    resource: str = ""  # ray.engine_resource
    deadlines: DeadlinesConfig = field(default_factory=DeadlinesConfig)
    handles: list = field(default_factory=list)
    version: int = 0
    weights: object = None  # ObjectRef of the current state_dict; None: the checkpoint at model_path
    restarts: int = 0
    _next_check: float = 0.0
    _misses: dict = field(default_factory=dict)  # engine index -> health probes missed in a row

    def start(self) -> "EngineSet":
        self.handles = [create_engine(self.cfg, i, self.model_path, self.namespace, resource=self.resource)
                        for i in range(self.cfg.num_engines)]
        return self

    def _replace(self, index: int) -> None:
        ray.kill(self.handles[index])  # dead or hung: ends it and frees its name sooner
        deadline = time.monotonic() + 30.0
        while True:  # the dead actor's name is released asynchronously
            try:
                handle = create_engine(self.cfg, index, self.model_path, self.namespace,
                                       wait_for_weights=self.weights is not None, resource=self.resource)
                break
            except ValueError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        if self.weights is not None:
            ray.get(handle.update_weights.remote(self.weights, self.version))
        self.handles[index] = handle
        self.restarts += 1
        print(f"[swerve] engine-{index} died; replaced, serving v{self.version}", flush=True)

    def replace_dead(self) -> list[int]:
        """Probe every engine; replace the dead and the hung ones (with the current weights). A dead
        actor is replaced at once; one whose server does not answer /health within
        deadlines.engine_health_s (a stopped or wedged server or actor) is replaced after
        deadlines.engine_health_misses such probes in a row, so a server that is only slow under
        load is not mistaken for a hung one. Returns the indices replaced."""
        health_s = self.deadlines.engine_health_s
        probes = [h.ping.remote(health_s) for h in self.handles]
        deadline = time.monotonic() + 2 * health_s
        dead = []
        for i, ref in enumerate(probes):
            try:
                answered = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except RayActorError:
                dead.append(i)
                continue
            except GetTimeoutError:
                answered = False
            self._misses[i] = 0 if answered else self._misses.get(i, 0) + 1
            if self._misses[i] >= self.deadlines.engine_health_misses:
                log.warning("engine-%d did not answer %d health probes of %.0f s in a row (hung); replacing it",
                            i, self._misses[i], health_s)
                dead.append(i)
        for i in dead:
            self._misses[i] = 0
            self._replace(i)
        self._next_check = time.monotonic() + self.cfg.health_interval_s
        return dead

    def maybe_replace_dead(self) -> list[int]:
        return self.replace_dead() if time.monotonic() >= self._next_check else []

    def sync(self, state_dict_ref, version: int) -> list[int]:
        """Every engine serves `version` when this returns (a dead one is replaced with it)."""
        self.weights, self.version = state_dict_ref, version
        refs = [h.update_weights.remote(state_dict_ref, version) for h in self.handles]
        deadline = time.monotonic() + self.deadlines.weight_sync_s
        versions = []
        for i, ref in enumerate(refs):
            try:
                versions.append(ray.get(ref, timeout=max(0.0, deadline - time.monotonic())))
            except (RayActorError, GetTimeoutError) as err:
                if isinstance(err, GetTimeoutError):
                    log.warning("engine-%d: weight update not done within %.0f s (hung); replacing it", i,
                                self.deadlines.weight_sync_s)
                self._replace(i)  # the replacement gets these weights before it serves
                versions.append(ray.get(self.handles[i].version.remote(), timeout=self.deadlines.weight_sync_s))
        return versions

    def stats(self, reset_peak: bool = False) -> list[dict]:
        out = []
        for i, h in enumerate(self.handles):
            try:
                out.append(ray.get(h.stats.remote(reset_peak), timeout=self.deadlines.engine_health_s))
            except (RayActorError, GetTimeoutError):  # dead or hung: the next probe replaces it
                out.append({"index": i, "dead": True, "kv_usage_peak": 0.0, "tokens_per_s": 0.0,
                            "busy_fraction": 0.0, "weight_update_s": 0.0})
        return out
