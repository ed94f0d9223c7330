"""Continuous batching on CPU: one thread, one decode step at a time, rows join and leave.

This file is the bookkeeping: the waiting queue, requests in flight, control commands and
stats; the model's work (prefill, decode, sampling, the prefix cache) is `decoder.Decoder`, the
running batch's KV layout `kv_batch.RunningBatch`. Each loop iteration:

1. runs queued control commands (abort, pause, continue, weight update, flush) — so they
   always land between two forwards, never inside one;
2. admits waiting requests (FIFO, up to `max_batch_size` rows, a KV-token budget and a
   per-step prefill-token budget), prefills them together (left-padded, explicit position
   ids), samples their first token and merges their KV into the batch;
3. runs one decode forward for every running row (input: each row's last token, position:
   the row's own length), samples one token per row; finished rows leave at once and the
   all-padding columns their departure leaves on the left are trimmed.

Sampling and logprobs are `policies.server.sampler.pick_tokens`: log_softmax(logits / T) at the
sampled token, before top-p. Each token is tagged with the weight version of the forward
that produced it. A weight update empties the prefix cache (finished requests' KV kept for
their conversation's next turn), so no stale KV is ever reused; `retract` pauses drop running
KV so it is recomputed with the new weights, `in_place` pauses keep it (SGLang's semantics).

A request's context (prompt + output) is capped at `max_context_tokens`: longer prompts are
refused (`request.check_request`, HTTP 400), generation stops at the cap with a "length" finish.
"""
from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Tuple

import torch
from transformers import PreTrainedModel

from policies.server.sampler import make_generator
from policies.engines import protocol
from policies.server.decoder import Decoder, Finished
from policies.server.request import Request, check_request

log = logging.getLogger(__name__)
# gen_throughput is the tokens/s of this last window; older counts are dropped after twice that.
THROUGHPUT_WINDOW_S = 5.0


class Scheduler:
    def __init__(
        self,
        model: PreTrainedModel,
        *,
        max_batch_size: int,
        max_context_tokens: int,
        prefix_cache_tokens: int,
        max_total_tokens: Optional[int] = None,
        max_prefill_tokens: Optional[int] = None,
        weight_version: str = "0",
        eos_token_ids: Iterable[int] = (),
        priority_preemption_threshold: Optional[int] = None,
    ):
        """The engine's sizes come from policies.server.options.ServerConfig (defaults:
        configs.schema.EngineConfig). Unset max_total_tokens: room for a full batch of full
        contexts; unset max_prefill_tokens: one full context (at least 1024) per step.
        priority_preemption_threshold set: priority scheduling (SGLang's): the queue is served
        by `priority` (larger first, then arrival), a full batch yields its lowest row to a
        waiting request higher by more than the threshold, and KV pressure retracts the lowest
        row first. None: arrival order."""
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if max_context_tokens < 2:
            raise ValueError(f"max_context_tokens must be >= 2, got {max_context_tokens}")
        self.model = model
        self.max_batch_size = max_batch_size
        self.max_context_tokens = max_context_tokens
        self.max_total_tokens = max_total_tokens or max_batch_size * max_context_tokens
        self.max_prefill_tokens = max_prefill_tokens or max(max_context_tokens, 1024)
        self.weight_version = str(weight_version)
        self.priority_threshold = priority_preemption_threshold
        self.decoder = Decoder(model, eos_token_ids, prefix_cache_tokens)  # scheduler thread only

        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._waiting: Deque[Request] = collections.deque()
        self._commands: Deque[Tuple[Callable[[], Any], concurrent.futures.Future]] = collections.deque()
        self._paused = False
        self._stop = False
        self._in_flight: Dict[str, Request] = {}
        # stats
        self._stats = {"running": 0, "kv_tokens": 0}
        self._recent: Deque[Tuple[float, int]] = collections.deque()  # (time, tokens sampled)
        self.total_generated_tokens = 0
        self.total_finished_requests = 0
        self.last_step_time = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="swerve-scheduler", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ public API
    def submit(self, request: Request) -> None:
        """Queue a request (thread-safe). Raises ValueError for an invalid one."""
        check_request(request, self.max_context_tokens, self.model.config.vocab_size)
        request.max_new_tokens = min(request.params.max_new_tokens, self.max_context_tokens - len(request.prompt_ids))
        if request.params.temperature > 0:
            request._generator = make_generator(request.params.sampling_seed, self.decoder.device)
        with self._lock:
            if self._stop:
                raise RuntimeError("the scheduler is stopped")
            if request.rid in self._in_flight:
                raise ValueError(f"Duplicate request ID {request.rid!r} is already in flight")
            self._in_flight[request.rid] = request
            self._waiting.append(request)
            self._wake.notify()

    def call(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        """Run fn in the scheduler thread between two forwards; returns its future."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._stop:
                future.set_exception(RuntimeError("the scheduler is stopped"))
                return future
            self._commands.append((fn, future))
            self._wake.notify()
        return future

    def abort(self, rid: str = "", abort_all: bool = False) -> concurrent.futures.Future:
        return self.call(lambda: self._abort(rid, abort_all, "Aborted by request."))

    def pause(self, mode: str = protocol.PAUSE_ABORT) -> concurrent.futures.Future:
        if mode not in protocol.PAUSE_MODES:
            raise ValueError(f"Invalid mode: {mode!r}. Expected one of {list(protocol.PAUSE_MODES)}.")
        return self.call(lambda: self._pause(mode))

    def resume(self) -> concurrent.futures.Future:
        def resume() -> None:
            self._paused = False
        return self.call(resume)

    def flush_cache(self) -> concurrent.futures.Future:
        """Empty the prefix cache and return True when idle; False when requests are running or
        waiting (SGLang refuses to flush then, and so do we)."""
        def flush() -> bool:
            if len(self.decoder.batch) or self._waiting:
                return False
            self.decoder.prefix_cache.clear()
            return True
        return self.call(flush)

    def update_weights(self, state_dict: Dict[str, torch.Tensor], weight_version: Optional[str],
                       abort_all_requests: bool = False) -> concurrent.futures.Future:
        """Copy new weights into the model between two forwards. Returns a future of
        (num_paused_requests, missing_keys)."""
        def update() -> Tuple[int, List[str]]:
            if abort_all_requests:
                self._abort("", True, "Aborted by update_weights_from_disk(abort_all_requests=True).")
            missing = self.decoder.load_weights(state_dict)
            if weight_version is not None:
                self.weight_version = str(weight_version)
            paused = len(self.decoder.batch) + len(self._waiting) if self._paused else 0
            return paused, missing
        return self.call(update)

    def set_weight_version(self, version: str) -> concurrent.futures.Future:
        def apply():
            self.weight_version = str(version)
        return self.call(apply)

    def stats(self) -> Dict[str, Any]:
        with self._lock:
            waiting = len(self._waiting)
            running = self._stats["running"]
            kv_tokens = self._stats["kv_tokens"]
        prefix_cache = self.decoder.prefix_cache
        return {
            "running": running,
            "waiting": waiting,
            "kv_tokens": kv_tokens,
            "kv_capacity": self.max_total_tokens,
            "kv_usage": kv_tokens / self.max_total_tokens,
            "paused": self._paused,
            "gen_throughput": self._throughput(),
            "total_generated_tokens": self.total_generated_tokens,
            "total_finished_requests": self.total_finished_requests,
            "weight_version": self.weight_version,
            "alive": self._thread.is_alive(),
            "prefix_cache_tokens": prefix_cache.tokens,
            "prefix_cache_hits": prefix_cache.hits,
            "prefix_cache_hit_tokens": prefix_cache.hit_tokens,
        }

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._stop = True
            self._wake.notify_all()
        self._thread.join(timeout)

    # ------------------------------------------------------------------ loop
    def _loop(self) -> None:
        try:
            while True:
                with self._lock:
                    while not self._stop and not self._commands and (
                            self._paused or (not self._waiting and not len(self.decoder.batch))):
                        self._wake.wait(timeout=1.0)
                    if self._stop:
                        break
                    commands = list(self._commands)
                    self._commands.clear()
                for fn, future in commands:
                    try:
                        result = fn()
                    except BaseException as error:  # report to the caller, keep serving
                        self._publish_stats()
                        future.set_exception(error)
                    else:
                        self._publish_stats()  # callers see the counts their command left
                        future.set_result(result)
                if not self._paused:
                    self._prefill_admitted()
                    if len(self.decoder.batch):
                        self._decode_step()
                self._publish_stats()
        except BaseException as error:  # a model error: fail every request, loudly
            self._fail_all(f"scheduler crashed: {type(error).__name__}: {error}")
            raise
        finally:
            self._fail_all("server shutting down")

    def _publish_stats(self) -> None:
        with self._lock:
            self._stats = {"running": len(self.decoder.batch), "kv_tokens": self.decoder.batch.kv_tokens()}
        self.last_step_time = time.monotonic()

    def _throughput(self) -> float:
        now = time.monotonic()
        recent = [(t, n) for t, n in list(self._recent) if now - t <= THROUGHPUT_WINDOW_S]
        if not recent:
            return 0.0
        span = max(now - recent[0][0], 1e-3)
        return sum(n for _, n in recent) / span

    def _count_tokens(self, n: int) -> None:
        now = time.monotonic()
        self.total_generated_tokens += n
        self._recent.append((now, n))
        while self._recent and now - self._recent[0][0] > 2 * THROUGHPUT_WINDOW_S:
            self._recent.popleft()

    # ------------------------------------------------------------------ admission, steps
    def _admit(self) -> List[Request]:
        """Waiting requests that fit (in queue order): batch rows, the KV-token pool and the
        per-step prefill budget; an idle batch always admits its first request."""
        admitted: List[Request] = []
        batch = self.decoder.batch
        with self._lock:
            if self.priority_threshold is not None:
                self._by_priority()
            kv_used = batch.kv_tokens()
            prefill_tokens = 0
            while self._waiting and len(batch) + len(admitted) < self.max_batch_size:
                need = len(self._waiting[0].tokens)
                if (len(batch) or admitted) and (kv_used + need + 1 > self.max_total_tokens
                                                 or prefill_tokens + need > self.max_prefill_tokens):
                    break
                admitted.append(self._waiting.popleft())
                kv_used += need + 1
                prefill_tokens += need
        return admitted

    def _by_priority(self) -> None:
        """Queue order by priority; then, while the batch is full, the queue's head preempts
        the lowest running row if it is higher by more than the threshold (lock held)."""
        self._waiting = collections.deque(sorted(self._waiting, key=_queue_key))
        rows = self.decoder.batch.requests
        while self._waiting and len(rows) >= self.max_batch_size:
            low = _lowest(rows)
            if _priority(self._waiting[0]) <= _priority(rows[low]) + self.priority_threshold:
                return
            self._waiting.append(self.decoder.retract(low))
            self._waiting = collections.deque(sorted(self._waiting, key=_queue_key))
            rows = self.decoder.batch.requests

    def _prefill_admitted(self) -> None:
        todo = []
        for request in self._admit():
            if len(request.output_ids) >= request.max_new_tokens:  # max_new_tokens == 0
                self._finish(request, {"type": protocol.FINISH_LENGTH, "length": len(request.output_ids)})
            else:
                todo.append(request)
        if todo:
            self._finish_all(self.decoder.prefill(todo, protocol.version_tag(self.weight_version)), len(todo))

    def _decode_step(self) -> None:
        if self.priority_threshold is None:
            retracted = self.decoder.retract_over(self.max_total_tokens)
        else:
            retracted = self.decoder.retract_over(self.max_total_tokens, _lowest)
        with self._lock:
            for request in retracted:  # newest first: the queue's head keeps arrival order
                self._waiting.appendleft(request)
        rows = len(self.decoder.batch)
        self._finish_all(self.decoder.decode(protocol.version_tag(self.weight_version)), rows)

    def _finish_all(self, finished: List[Finished], sampled_tokens: int) -> None:
        for request, reason in finished:
            self._finish(request, reason)
        self._count_tokens(sampled_tokens)

    # ------------------------------------------------------------------ commands
    def _finish(self, request: Request, reason: Dict[str, Any]) -> None:
        request.finish_reason = reason
        request.weight_version = self.weight_version
        request.finished_at = time.monotonic()
        with self._lock:
            self._in_flight.pop(request.rid, None)
        self.total_finished_requests += 1
        if request.on_done is not None:
            try:
                request.on_done(request)
            except Exception:  # a broken callback must not kill the scheduler; it is logged
                log.exception("on_done callback of request %s failed", request.rid)

    def _abort(self, rid: str, abort_all: bool, message: str) -> int:
        with self._lock:
            waiting = [r for r in self._waiting if abort_all or r.rid == rid]
            for request in waiting:
                self._waiting.remove(request)
        running = self.decoder.batch.requests
        hit = [i for i, r in enumerate(running) if abort_all or r.rid == rid]
        if hit:
            self.decoder.batch.keep([i for i in range(len(running)) if i not in hit])
        for request in waiting + [running[i] for i in hit]:
            self._finish(request, {"type": protocol.FINISH_ABORT, "message": message})
        return len(waiting) + len(hit)

    def _pause(self, mode: str) -> int:
        self._paused = True
        if mode == protocol.PAUSE_ABORT:
            return self._abort("", True, "Aborted by pause_generation(mode='abort').")
        if mode == protocol.PAUSE_RETRACT:
            retracted = list(self.decoder.batch.requests)
            self.decoder.batch.clear()
            with self._lock:
                for request in reversed(retracted):
                    request._kv_len = 0
                    self._waiting.appendleft(request)
            return len(retracted)
        return len(self.decoder.batch)

    def _fail_all(self, message: str) -> None:
        with self._lock:
            waiting = list(self._waiting)
            self._waiting.clear()
        for request in waiting + list(self.decoder.batch.requests):
            if not request.done:
                self._finish(request, {"type": protocol.FINISH_ABORT, "message": message})
        self.decoder.batch.clear()
        with self._lock:
            commands = list(self._commands)
            self._commands.clear()
        for _, future in commands:
            if not future.done():
                future.set_exception(RuntimeError(message))


def _priority(request: Request) -> float:
    return float("-inf") if request.priority is None else request.priority


def _queue_key(request: Request) -> tuple:
    return -_priority(request), request.created


def _lowest(rows: List[Request]) -> int:
    """The row priority scheduling gives up first: lowest priority, the newest among equals."""
    return min(range(len(rows)), key=lambda i: (_priority(rows[i]), -rows[i].created))
