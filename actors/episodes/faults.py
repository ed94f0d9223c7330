"""Fault injection (faults.*): wrappers installed when the fleet is built, and only then.

A run with every faults.* rate at 0 holds no wrapper and no fault code runs. Otherwise each
episode actor wraps its engine router and sandbox lease with the ones below; the parts
themselves (router, lease, grader, env) know nothing of injected faults. Every injected
fault must end its episode as an infra_error of the right source, which the episode actor
checks through `FaultPlan.injected` (actors/report/fault_report.py tabulates it).
"""
from __future__ import annotations

import random
import time
from collections import Counter
from typing import Dict, Mapping, Optional, Sequence

import ray

from configs.schema import FaultsConfig
from envs.grading.grader import GRADING_MARK
from envs.outcomes import InfraError, InfraSource
from envs.sandboxes.sandbox import ExecResult
from policies.sample_types import SampleOutput, SampleRequest


class FaultPlan:
    """The injection draws of one episode actor (seeded) and what they injected, by kind."""

    def __init__(self, cfg: FaultsConfig, seed: int):
        self.cfg = cfg
        self._rng = random.Random(seed)
        self.injected: Counter = Counter()

    @staticmethod
    def for_episode(cfg: FaultsConfig, seed: int) -> Optional["FaultPlan"]:
        """None when no episode-side rate is set: the fleet then installs no wrapper at all."""
        rates = (cfg.llm_error_rate, cfg.sandbox_kill_rate, cfg.sandbox_start_fail_rate, cfg.grader_crash_rate)
        return FaultPlan(cfg, seed) if any(rates) else None

    def draw(self, kind: str, rate: float) -> bool:
        if rate and self._rng.random() < rate:
            self.injected[kind] += 1
            return True
        return False

    def wrap_router(self, router) -> "FaultyRouter":
        return FaultyRouter(router, self)

    def wrap_sandbox(self, lease) -> "FaultySandbox":
        return FaultySandbox(lease, self)


class FaultyRouter:
    """faults.llm_error_rate: a generate call fails as infra_error(engine) before it is sent."""

    def __init__(self, router, plan: FaultPlan):
        self.router, self.plan = router, plan

    def generate(self, request: SampleRequest, sticky_key: str) -> SampleOutput:
        if self.plan.draw("llm_error", self.plan.cfg.llm_error_rate):
            raise InfraError(InfraSource.ENGINE, "injected LLM call error (faults.llm_error_rate)")
        return self.router.generate(request, sticky_key)

    def release(self, sticky_key: str) -> None:
        self.router.release(sticky_key)


class FaultySandbox:
    """Around a SandboxLease (actors/fleet/remote.py):
    - faults.sandbox_start_fail_rate: start() fails as infra_error(sandbox);
    - faults.sandbox_kill_rate: the sandbox actor is killed under a call, as a crash would;
    - faults.grader_crash_rate: the actor is killed as the task's test command starts, so the
      tests die under the grader (infra_error(grader)), as if the grader's process crashed."""

    def __init__(self, lease, plan: FaultPlan):
        self.lease, self.plan = lease, plan
        self._test_command: Optional[str] = None

    def _maybe_kill(self) -> None:
        if self.plan.draw("sandbox_kill", self.plan.cfg.sandbox_kill_rate):
            self.lease.kill()

    def start(self, task) -> None:
        if self.plan.draw("sandbox_start_fail", self.plan.cfg.sandbox_start_fail_rate):
            raise InfraError(InfraSource.SANDBOX, "injected sandbox start failure (faults.sandbox_start_fail_rate)")
        self._maybe_kill()
        self.lease.start(task)
        self._test_command = task.test_command

    def exec(self, command: str, timeout_s: Optional[float] = None) -> ExecResult:
        grading = bool(self._test_command) and (command.startswith(self._test_command) or GRADING_MARK in command)
        if grading and self.plan.draw("grader_crash", self.plan.cfg.grader_crash_rate):
            self.lease.kill()
        else:
            self._maybe_kill()
        return self.lease.exec(command, timeout_s)

    def read_files(self, paths: Sequence[str]) -> Dict[str, str]:
        self._maybe_kill()
        return self.lease.read_files(paths)

    def gateway_dir(self):
        return self.lease.gateway_dir()

    def write_files(self, files: Mapping[str, str]) -> None:
        self._maybe_kill()
        self.lease.write_files(files)

    def reset(self) -> None:
        self._maybe_kill()
        self.lease.reset()

    def close(self) -> None:
        self.lease.close()


class EngineKills:
    """faults.engine_kill_rate: before a step's rollouts, maybe kill the busiest engine actor,
    mid-generation when any request is running; its requests fail as infra_error(engine) and the
    engine set replaces it as it would after a crash (the driver's draw, seeded)."""

    # How long a kill waits for some engine to be generating.
    KILL_WAIT_S = 10.0

    def __init__(self, rate: float, seed: int):
        self.rate = rate
        self._rng = random.Random(seed)
        self.injected = 0

    def maybe_kill(self, engine_set) -> Optional[int]:
        if not (self.rate and self._rng.random() < self.rate):
            return None
        deadline = time.monotonic() + self.KILL_WAIT_S
        while True:  # wait (bounded) for a request to be running, so the kill lands mid-generation
            loads = [(s.get("running", 0) + s.get("queued", 0), i) for i, s in enumerate(engine_set.stats())
                     if not s.get("dead")]
            if not loads or max(loads)[0] > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        index = max(loads)[1] if loads else 0
        ray.kill(engine_set.handles[index])
        self.injected += 1
        print(f"[swerve] fault injected: engine-{index} killed", flush=True)
        return index
