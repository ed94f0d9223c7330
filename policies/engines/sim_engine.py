"""SimEngine: `engine.backend=sim`, an engine that costs time instead of compute (engine.sim).

It stands where an EngineActor stands (same calls: generate, update_weights, stats, ping,
version), so the real routers, episode actors, sandboxes, collector and driver run around it;
`swerve bench async_vs_sync` measures them with it.

- Batching: one decode loop; a step of b running requests (at most engine.max_batch_size, the
  rest queue) takes step_base_s + step_per_request_s * b and gives each one token, so a batch
  that drains in the tail runs nearly idle, as a real engine's does. Steps that cost nothing
  (both zero: `swerve bench turn_overhead`'s zero-work engine) give each running request all
  its tokens at once, so the engine's own thread hand-offs are not counted as decoding. Which
  requests run when more are active than fit: engine.priority "fifo" the earliest, "age" the largest `priority`
  (then the earliest), chosen again every step (preemption, as SGLang's priority scheduling).
- Replies are a scripted agent's: at a trajectory's first turn a plan is drawn from the request's
  seed (tokens per reply, the turn it submits at or never), and every reply carries it
  (`[sim plan LxK turn T]`), so the engine keeps no state per trajectory and any engine can
  serve any turn. A reply is one ```bash block (engine.sim.command, or `submit` at the planned
  turn), the plan marker, filler up to the planned length, and <|im_end|>. A request's stop
  strings end it at the first token whose text holds one, as a real engine's do.
"""
from __future__ import annotations

import random
import re
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Optional

from configs.schema import DeadlinesConfig, EngineConfig, SimEngineConfig
from policies.sample_types import FINISH_LENGTH, FINISH_STOP, SampleOutput, SampleRequest
from policies.chat.chat_tokenizer import IM_END, load_chat_tokenizer

MARKER = re.compile(r"\[sim plan (\d+)x(\d+) turn (\d+)\]")
# Log-prob reported for every scripted token (nothing is sampled; the trainer only needs a number).
SCRIPTED_LOGPROB = -0.5


@dataclass(frozen=True)
class Plan:
    tokens_per_turn: int
    submit_turn: int  # 0: never submits (the episode ends at rollout.max_turns)


def draw_plan(cfg: SimEngineConfig, rng: random.Random) -> Plan:
    if cfg.tokens_distribution == "pareto":
        tokens = min(cfg.tokens_per_turn_max, int(cfg.tokens_per_turn_min * rng.paretovariate(cfg.tokens_pareto_shape)))
    else:
        tokens = rng.randint(cfg.tokens_per_turn_min, cfg.tokens_per_turn_max)
    submits = rng.random() >= cfg.cap_fraction
    return Plan(tokens, rng.randint(cfg.submit_turn_min, cfg.submit_turn_max) if submits else 0)


def plan_turns(plan: Plan, max_turns: int) -> int:
    return min(plan.submit_turn, max_turns) if plan.submit_turn else max_turns


def workload_means(cfg: SimEngineConfig, max_turns: int, samples: int = 100_000, seed: int = 0) -> dict:
    """Mean turns and generated tokens per trajectory of a workload, from its own plan distribution."""
    rng = random.Random(seed)
    plans = [draw_plan(cfg, rng) for _ in range(samples)]
    turns = [plan_turns(p, max_turns) for p in plans]
    return {"turns": statistics.fmean(turns),
            "tokens": statistics.fmean(p.tokens_per_turn * t for p, t in zip(plans, turns)),
            "capped_fraction": sum(not p.submit_turn or p.submit_turn > max_turns for p in plans) / samples}


class _Request:
    def __init__(self, ids: list[int], finish_reason: str, priority: Optional[int]):
        self.ids, self.finish_reason = ids, finish_reason
        self.priority = float("-inf") if priority is None else priority
        self.versions: list[int] = []
        self.done = threading.Event()


class SimEngine:
    def __init__(self, index: int, cfg: EngineConfig, model_path: str, wait_for_weights: bool = False,
                 exit_on_server_death: bool = False, deadlines: Optional[DeadlinesConfig] = None):
        """Same arguments as EngineActor; there is no server, so exit_on_server_death has nothing
        to watch and no deadline bounds a probe of one."""
        self.index, self.cfg, self.sim = index, cfg, cfg.sim
        self.tokenizer = load_chat_tokenizer(model_path)
        self._im_end = self.tokenizer.convert_tokens_to_ids(IM_END)
        filler = self.tokenizer.encode(" .", add_special_tokens=False)
        self._filler = filler[0] if len(filler) == 1 else self.tokenizer.encode(".", add_special_tokens=False)[0]
        self._version = 0
        self._ready = threading.Event()
        if not wait_for_weights:
            self._ready.set()
        self._cv = threading.Condition()
        self._active: list[_Request] = []
        self._paused = False
        self._closing = False
        self._served = 0
        self._tokens = 0
        self._busy_s = 0.0
        self._steps = 0
        self._window_start = time.monotonic()
        self._last_update_s = 0.0
        threading.Thread(target=self._decode_loop, name=f"sim-engine-{index}", daemon=True).start()

    # -- the scripted agent -------------------------------------------------------------
    def reply_ids(self, prompt_ids: list[int], seed: Optional[int]) -> list[int]:
        """The scripted reply to this prompt: the next turn of the plan its earlier replies carry."""
        found = MARKER.findall(self.tokenizer.decode(prompt_ids, skip_special_tokens=False))
        if found:
            tokens, submit, last_turn = map(int, found[-1])
            plan, turn = Plan(tokens, submit), last_turn + 1
        else:
            plan, turn = draw_plan(self.sim, random.Random(seed)), 1
        command = "submit" if turn == plan.submit_turn else self.sim.command
        text = f"```bash\n{command}\n```\n[sim plan {plan.tokens_per_turn}x{plan.submit_turn} turn {turn}]"
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return ids + [self._filler] * (plan.tokens_per_turn - len(ids) - 1) + [self._im_end]

    # -- requests ---------------------------------------------------------------------
    def generate(self, request: SampleRequest) -> SampleOutput:
        self._ready.wait()
        ids = self.reply_ids(list(request.prompt_ids), request.seed)
        budget = min(request.max_new_tokens, self.cfg.max_context_tokens - len(request.prompt_ids))
        if budget <= 0:
            return SampleOutput([], [], [], FINISH_LENGTH)
        cut = self._stop_at(ids[:budget], request.stop)
        if cut is not None:
            ids, finish = ids[:cut], FINISH_STOP
        else:
            ids, finish = ids[:budget], FINISH_STOP if len(ids) <= budget else FINISH_LENGTH
        req = _Request(ids, finish, request.priority if self.cfg.priority == "age" else None)
        with self._cv:
            self._active.append(req)
            self._cv.notify_all()
        req.done.wait()
        with self._cv:
            self._served += 1
        return SampleOutput(req.ids, [SCRIPTED_LOGPROB] * len(req.ids), req.versions, req.finish_reason)

    def _stop_at(self, ids: list[int], stop: tuple[str, ...]) -> Optional[int]:
        """The fewest leading ids whose text holds a stop string (where a real engine stops, the
        token that completes it kept), None when none does."""
        if not stop or not any(s in self.tokenizer.decode(ids, skip_special_tokens=False) for s in stop):
            return None
        return next(k for k in range(1, len(ids) + 1)
                    if any(s in self.tokenizer.decode(ids[:k], skip_special_tokens=False) for s in stop))

    def _decode_loop(self) -> None:
        while True:
            with self._cv:
                while (not self._active or self._paused) and not self._closing:
                    self._cv.wait()
                if self._closing:
                    return
                running, version = self._running(), self._version
            started = time.perf_counter()
            step_s = self.sim.step_base_s + self.sim.step_per_request_s * len(running)
            time.sleep(step_s)
            with self._cv:
                self._busy_s += time.perf_counter() - started
                self._steps += 1
                for req in running:
                    tokens = 1 if step_s > 0 else len(req.ids) - len(req.versions)
                    req.versions += [version] * tokens
                    self._tokens += tokens
                    if len(req.versions) == len(req.ids):
                        self._active.remove(req)
                        req.done.set()

    def _running(self) -> list[_Request]:
        """The requests this step decodes (lock held): _active is in arrival order, and a stable
        sort by priority keeps arrival order among equals."""
        if self.cfg.priority == "age":
            return sorted(self._active, key=lambda r: -r.priority)[: self.cfg.max_batch_size]
        return self._active[: self.cfg.max_batch_size]

    # -- weights and health -------------------------------------------------------------
    def update_weights(self, weights: Optional[bytes], version: int) -> int:
        """Decoding pauses for engine.sim.weight_update_s; in-flight requests continue after it."""
        started = time.perf_counter()
        with self._cv:
            self._paused = True
        time.sleep(self.sim.weight_update_s)
        with self._cv:
            self._version, self._paused = version, False
            self._cv.notify_all()
        self._ready.set()
        self._last_update_s = time.perf_counter() - started
        return version

    def version(self) -> int:
        return self._version

    def ping(self, timeout_s: float) -> bool:
        """No server to probe: alive until closed (timeout_s: EngineActor.ping's signature)."""
        return not self._closing

    def stats(self, reset_peak: bool = False) -> dict:
        now = time.monotonic()
        with self._cv:
            window_s = max(now - self._window_start, 1e-6)
            kv = sum(len(r.ids) for r in self._active) / (self.cfg.max_batch_size * self.cfg.max_context_tokens)
            stats = {
                "index": self.index, "version": self._version, "ready": self._ready.is_set(),
                "running": min(len(self._active), self.cfg.max_batch_size),
                "queued": max(len(self._active) - self.cfg.max_batch_size, 0), "served": self._served,
                "kv_usage": kv, "kv_usage_peak": kv, "tokens_per_s": self._tokens / window_s,
                "busy_fraction": min(self._busy_s / window_s, 1.0),
                "batch_mean": self._tokens / self._steps if self._steps else 0.0,
                "weight_update_s": self._last_update_s, "server_alive": not self._closing,
            }
            if reset_peak:
                self._tokens = self._steps = 0
                self._busy_s = 0.0
                self._window_start = now
        return stats

    def close(self) -> None:
        with self._cv:
            self._closing = True
            self._cv.notify_all()
