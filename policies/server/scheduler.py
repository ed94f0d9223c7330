"""Continuous batching on CPU: one thread, one decode step at a time, rows join and leave.

The running batch is one left-padded KV cache (an HF `DynamicCache` whose per-layer tensors
are [rows, kv_heads, width, head_dim]) plus a [rows, width] attention mask. A row holds the
KV of every token of its sequence but the last sampled one, which is the row's next input.
Each loop iteration:

1. runs queued control commands (abort, pause, continue, weight update, flush) — so they
   always land between two forwards, never inside one;
2. admits waiting requests (FIFO, up to `max_batch_size` rows, a KV-token budget and a
   per-step prefill-token budget), prefills them together (left-padded, explicit position
   ids), samples their first token and merges their KV into the batch;
3. runs one decode forward for every running row (input: each row's last token, position:
   the row's own length), samples one token per row; finished rows leave at once and the
   all-padding columns their departure leaves on the left are trimmed.

Sampling and logprobs are `policies.sampler.sample_token`: log_softmax(logits / T) at the
sampled token, before top-p. Each token is tagged with the weight version of the forward
that produced it. There is no prefix cache, so a weight update can never be served stale
prefix KV; `retract` pauses drop running KV so it is recomputed with the new weights,
`in_place` pauses keep it (SGLang's semantics for both).

A request's context (prompt + output) is capped at `max_context_tokens`: longer prompts are
refused by the caller (`check_prompt`), generation stops at the cap with a "length" finish.
"""
from __future__ import annotations

import logging

import collections
import concurrent.futures
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from transformers import DynamicCache, PreTrainedModel

from policies.sampler import _cache_kwarg, make_generator, sample_token
from policies.server import protocol
from policies.server.prefix_cache import PrefixCache

log = logging.getLogger(__name__)


class PromptTooLong(ValueError):
    """The prompt alone reaches max_context_tokens; answered with HTTP 400 naming the limit."""


@dataclass
class Request:
    """One generation request and everything the scheduler knows about it."""

    prompt_ids: List[int]
    params: protocol.SamplingParams
    rid: str = field(default_factory=lambda: uuid.uuid4().hex)
    return_logprob: bool = False
    # Called once, from the scheduler thread, when the request finishes (any reason).
    on_done: Optional[Callable[["Request"], None]] = None

    output_ids: List[int] = field(default_factory=list)
    logprobs: List[float] = field(default_factory=list)
    versions: List[Any] = field(default_factory=list)
    finish_reason: Optional[Dict[str, Any]] = None
    weight_version: str = ""          # version when it finished (SGLang's meta_info field)
    max_new_tokens: int = 0           # after the context cap (set by the scheduler)
    created: float = field(default_factory=time.monotonic)
    finished_at: float = 0.0
    # scheduler-private
    _kv_len: int = 0
    _generator: Optional[torch.Generator] = None

    @property
    def done(self) -> bool:
        return self.finish_reason is not None


class Scheduler:
    def __init__(
        self,
        model: PreTrainedModel,
        *,
        max_batch_size: int = 16,
        max_context_tokens: int = 4096,
        max_total_tokens: Optional[int] = None,
        max_prefill_tokens: Optional[int] = None,
        weight_version: str = "0",
        eos_token_ids: Iterable[int] = (),
        prefix_cache_tokens: int = 0,
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if max_context_tokens < 2:
            raise ValueError(f"max_context_tokens must be >= 2, got {max_context_tokens}")
        self.model = model
        self.max_batch_size = max_batch_size
        self.max_context_tokens = max_context_tokens
        # The KV pool: enough for a full batch of full contexts unless told otherwise.
        self.max_total_tokens = max_total_tokens or max_batch_size * max_context_tokens
        self.max_prefill_tokens = max_prefill_tokens or max(max_context_tokens, 1024)
        self.weight_version = str(weight_version)
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        self._device = model.get_input_embeddings().weight.device
        self._pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
        self._cache_kwarg = _cache_kwarg(model)
        # KV of finished requests for the next turn of their conversation (0 tokens: off).
        self.prefix_cache = PrefixCache(prefix_cache_tokens)

        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._waiting: Deque[Request] = collections.deque()
        self._commands: Deque[Tuple[Callable[[], Any], concurrent.futures.Future]] = (
            collections.deque())
        self._paused = False
        self._stop = False
        self._in_flight: Dict[str, Request] = {}
        # running batch (scheduler thread only)
        self._running: List[Request] = []
        self._cache: Optional[DynamicCache] = None
        self._mask: Optional[torch.Tensor] = None
        # stats
        self._stats = {"running": 0, "kv_tokens": 0}
        self._recent: Deque[Tuple[float, int]] = collections.deque()
        self.total_generated_tokens = 0
        self.total_finished_requests = 0
        self.last_step_time = time.monotonic()
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._loop, name="swerve-scheduler", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ public API
    def check_prompt(self, prompt_ids: Sequence[int]) -> None:
        if not prompt_ids:
            raise ValueError("input_ids is empty")
        if len(prompt_ids) >= self.max_context_tokens:
            raise PromptTooLong(
                f"The input ({len(prompt_ids)} tokens) is longer than the server's context "
                f"cap max_context_tokens={self.max_context_tokens} allows (at most "
                f"{self.max_context_tokens - 1} prompt tokens, leaving room for one "
                "generated token).")

    def submit(self, request: Request) -> None:
        """Queue a request (thread-safe). Raises ValueError for an invalid one."""
        self.check_prompt(request.prompt_ids)
        params = request.params
        if params.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {params.max_new_tokens}")
        if params.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {params.temperature}")
        if not 0.0 < params.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {params.top_p}")
        if params.top_k not in (-1, 0, None):
            raise ValueError("top_k is not supported by the swerve CPU server (use -1)")
        vocab = self.model.config.vocab_size
        bad = [t for t in request.prompt_ids if not 0 <= int(t) < vocab]
        if bad:
            raise ValueError(f"input_ids out of vocabulary range [0, {vocab}): {bad[:5]}")
        request.max_new_tokens = min(
            params.max_new_tokens, self.max_context_tokens - len(request.prompt_ids))
        if params.temperature > 0:
            request._generator = make_generator(params.sampling_seed, self._device)
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
        return self.call(self._resume)

    def flush_cache(self) -> concurrent.futures.Future:
        """Empty the prefix cache and return True when idle; False when requests are running or
        waiting (SGLang refuses to flush then, and so do we)."""
        def flush() -> bool:
            if self._running or self._waiting:
                return False
            self.prefix_cache.clear()
            return True
        return self.call(flush)

    def update_weights(self, state_dict: Dict[str, torch.Tensor], weight_version: Optional[str],
                       abort_all_requests: bool = False) -> concurrent.futures.Future:
        """Copy new weights into the model between two forwards. Returns a future of
        (num_paused_requests, missing_keys)."""
        return self.call(lambda: self._update_weights(state_dict, weight_version,
                                                      abort_all_requests))

    def set_weight_version(self, version: str) -> concurrent.futures.Future:
        def apply():
            self.weight_version = str(version)
        return self.call(apply)

    @property
    def paused(self) -> bool:
        return self._paused

    def stats(self) -> Dict[str, Any]:
        with self._lock:
            waiting = len(self._waiting)
            running = self._stats["running"]
            kv_tokens = self._stats["kv_tokens"]
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
            "prefix_cache_tokens": self.prefix_cache.tokens,
            "prefix_cache_hits": self.prefix_cache.hits,
            "prefix_cache_hit_tokens": self.prefix_cache.hit_tokens,
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
                            self._paused or (not self._waiting and not self._running)):
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
                    with torch.no_grad():
                        self._admit_and_prefill()
                        if self._running:
                            self._decode_step()
                self._publish_stats()
        except BaseException as error:  # a model error: fail every request, loudly
            self.error = error
            self._fail_all(f"scheduler crashed: {type(error).__name__}: {error}")
            raise
        finally:
            self._fail_all("server shutting down")

    def _publish_stats(self) -> None:
        with self._lock:
            self._stats = {"running": len(self._running),
                           "kv_tokens": sum(r._kv_len + 1 for r in self._running)}
        self.last_step_time = time.monotonic()

    def _throughput(self, window_s: float = 5.0) -> float:
        now = time.monotonic()
        recent = [(t, n) for t, n in list(self._recent) if now - t <= window_s]
        if not recent:
            return 0.0
        span = max(now - recent[0][0], 1e-3)
        return sum(n for _, n in recent) / span

    def _count_tokens(self, n: int) -> None:
        now = time.monotonic()
        self.total_generated_tokens += n
        self._recent.append((now, n))
        while self._recent and now - self._recent[0][0] > 10.0:
            self._recent.popleft()

    # ------------------------------------------------------------------ admission + prefill
    def _admit_and_prefill(self) -> None:
        admitted: List[Request] = []
        with self._lock:
            kv_used = sum(r._kv_len + 1 for r in self._running)
            prefill_tokens = 0
            while self._waiting and len(self._running) + len(admitted) < self.max_batch_size:
                request = self._waiting[0]
                need = len(request.prompt_ids) + len(request.output_ids)
                busy = self._running or admitted
                if busy and (kv_used + need + 1 > self.max_total_tokens
                             or prefill_tokens + need > self.max_prefill_tokens):
                    break
                self._waiting.popleft()
                kv_used += need + 1
                prefill_tokens += need
                admitted.append(request)
        todo = []
        for request in admitted:
            if len(request.output_ids) >= request.max_new_tokens:  # max_new_tokens == 0
                self._finish(request, {"type": protocol.FINISH_LENGTH,
                                       "length": len(request.output_ids)})
            else:
                todo.append(request)
        if not todo:
            return
        sequences = [r.prompt_ids + r.output_ids for r in todo]
        cached = [self.prefix_cache.match(seq) if self.prefix_cache.max_tokens else (0, None)
                  for seq in sequences]
        cache, past_mask = self._past_kv(cached)
        # Each row: [left padding | its cached prefix | left padding | the tokens to prefill].
        fresh = [seq[n:] for seq, (n, _) in zip(sequences, cached)]
        width = max(len(s) for s in fresh)
        rows = len(todo)
        input_ids = torch.full((rows, width), self._pad_id, dtype=torch.long, device=self._device)
        new_mask = torch.zeros((rows, width), dtype=torch.long, device=self._device)
        position_ids = torch.zeros((rows, width), dtype=torch.long, device=self._device)
        for row, (seq, (n, _)) in enumerate(zip(fresh, cached)):
            input_ids[row, width - len(seq):] = torch.tensor(seq, device=self._device)
            new_mask[row, width - len(seq):] = 1
            position_ids[row, width - len(seq):] = torch.arange(n, n + len(seq), device=self._device)
        mask = torch.cat([past_mask, new_mask], dim=1)
        logits = self.model(
            input_ids=input_ids, attention_mask=mask, position_ids=position_ids,
            use_cache=True, logits_to_keep=1, **{self._cache_kwarg: cache},
        ).logits[:, -1].float()
        for row, request in enumerate(todo):
            request._kv_len = len(sequences[row])
        keep = self._sample_rows(todo, logits, cache, mask)
        # Their KV joins the batch; rows finished by their first token never join.
        if keep:
            self._merge(todo, keep, cache, mask)

    def _past_kv(self, cached: List[Tuple[int, Any]]) -> Tuple[DynamicCache, torch.Tensor]:
        """A batch cache holding each row's cached prefix, left-padded to the longest, and its
        [rows, width] mask (width 0 when nothing was cached)."""
        cache = DynamicCache(config=self.model.config)
        width = max(n for n, _ in cached)
        mask = torch.zeros((len(cached), width), dtype=torch.long, device=self._device)
        if width == 0:
            return cache, mask
        for row, (n, _) in enumerate(cached):
            mask[row, width - n:] = 1
        sample = next(layers for n, layers in cached if n)
        for index, (k0, v0) in enumerate(sample):
            keys = k0.new_zeros((len(cached), k0.shape[0], width, k0.shape[2]))
            values = v0.new_zeros((len(cached), v0.shape[0], width, v0.shape[2]))
            for row, (n, layers) in enumerate(cached):
                if n:
                    keys[row, :, width - n:] = layers[index][0]
                    values[row, :, width - n:] = layers[index][1]
            cache.update(keys, values, index)
        return cache, mask

    def _keep_prefix(self, request: Request, row: int, reason: Dict[str, Any], cache: Optional[DynamicCache],
                     mask: Optional[torch.Tensor]) -> None:
        """A request that finished on its own leaves its KV for its conversation's next turn."""
        if cache is None or mask is None or not self.prefix_cache.max_tokens:
            return
        if reason.get("type") == protocol.FINISH_ABORT:
            return
        columns = mask[row].bool()
        layers = [(layer.keys[row][:, columns], layer.values[row][:, columns]) for layer in cache.layers]
        tokens = (request.prompt_ids + request.output_ids)[: request._kv_len]
        if layers and layers[0][0].shape[1] == len(tokens):
            self.prefix_cache.put(tokens, layers)

    def _merge(self, rows: List[Request], keep: List[int], cache: DynamicCache,
               mask: torch.Tensor) -> None:
        if len(keep) < len(rows):
            cache, mask = _select(cache, mask, keep)
        new_rows = [rows[i] for i in keep]
        if self._cache is None or not self._running:
            self._cache, self._mask, self._running = cache, mask, new_rows
            self._trim()
            return
        width = max(self._mask.shape[1], mask.shape[1])
        for old, new in zip(self._cache.layers, cache.layers):
            old.keys = torch.cat([_left_pad(old.keys, width, 2), _left_pad(new.keys, width, 2)])
            old.values = torch.cat([_left_pad(old.values, width, 2),
                                    _left_pad(new.values, width, 2)])
        self._mask = torch.cat([_left_pad(self._mask, width, 1), _left_pad(mask, width, 1)])
        self._running = self._running + new_rows
        self._trim()

    # ------------------------------------------------------------------ decode
    def _decode_step(self) -> None:
        self._retract_over_budget()
        rows = self._running
        input_ids = torch.tensor([[r.output_ids[-1]] for r in rows], dtype=torch.long,
                                 device=self._device)
        position_ids = torch.tensor([[r._kv_len] for r in rows], dtype=torch.long,
                                    device=self._device)
        self._mask = torch.cat([self._mask, self._mask.new_ones(len(rows), 1)], dim=1)
        logits = self.model(
            input_ids=input_ids, attention_mask=self._mask, position_ids=position_ids,
            use_cache=True, logits_to_keep=1, **{self._cache_kwarg: self._cache},
        ).logits[:, -1].float()
        for r in rows:
            r._kv_len += 1
        keep = self._sample_rows(rows, logits, self._cache, self._mask)
        if len(keep) < len(rows):
            self._remove_rows(keep)

    def _sample_rows(self, rows: List[Request], logits: torch.Tensor, cache: Optional[DynamicCache] = None,
                     mask: Optional[torch.Tensor] = None) -> List[int]:
        """Sample one token per row; finish rows that stop (keeping their KV in the prefix cache
        when `cache` / `mask` hold it). Returns the rows to keep."""
        version = protocol.version_tag(self.weight_version)
        keep = []
        picks = self._pick_tokens(rows, logits)
        for i, request in enumerate(rows):
            token, logprob = picks[i]
            request.output_ids.append(token)
            request.logprobs.append(logprob)
            request.versions.append(version)
            reason = self._stop_reason(request, token)
            if reason is None:
                keep.append(i)
            else:
                self._keep_prefix(request, i, reason, cache, mask)  # before the caller hears it is done
                self._finish(request, reason)
        self._count_tokens(len(rows))
        return keep

    def _pick_tokens(self, rows: List[Request], logits: torch.Tensor) -> List[Tuple[int, float]]:
        """`sample_token` for every row, with the log-softmax batched across rows.

        Same math as `policies.sampler.sample_token`: greedy rows take the argmax and report
        the temperature-1 logprob; sampled rows draw from softmax(logits / T) (top-p
        filtered) with their own generator and report log_softmax(logits / T) at the token.
        """
        temps = torch.tensor([r.params.temperature or 1.0 for r in rows], dtype=logits.dtype,
                             device=logits.device)
        logprobs = torch.log_softmax(logits / temps[:, None], dim=-1)
        greedy = [r.params.temperature == 0 for r in rows]
        argmax = logits.argmax(dim=-1).tolist() if any(greedy) else None
        picks: List[Tuple[int, float]] = []
        for i, request in enumerate(rows):
            if greedy[i]:
                token = argmax[i]
            elif request.params.top_p < 1.0:
                token, _ = sample_token(logits[i], request.params.temperature,
                                        request.params.top_p, request._generator)
            else:
                token = int(torch.multinomial(logprobs[i].exp(), 1, generator=request._generator))
            picks.append((token, 0.0))
        tokens = torch.tensor([t for t, _ in picks], dtype=torch.long, device=logits.device)
        values = logprobs.gather(-1, tokens[:, None])[:, 0].tolist()
        return [(t, v) for (t, _), v in zip(picks, values)]

    def _stop_reason(self, request: Request, token: int) -> Optional[Dict[str, Any]]:
        params = request.params
        if (not params.ignore_eos and token in self.eos_token_ids) or token in params.stop_token_ids:
            return {"type": protocol.FINISH_STOP, "matched": token}
        if len(request.output_ids) >= request.max_new_tokens:
            return {"type": protocol.FINISH_LENGTH, "length": len(request.output_ids)}
        return None

    def _retract_over_budget(self) -> None:
        # Decode growth past the KV pool (possible only when max_total_tokens is set below
        # max_batch_size * max_context_tokens): send the newest rows back to the queue, as
        # SGLang retracts; they are re-prefilled later from their tokens so far.
        while len(self._running) > 1 and (
                sum(r._kv_len + 2 for r in self._running) > self.max_total_tokens):
            victim = len(self._running) - 1
            request = self._running[victim]
            self._remove_rows([i for i in range(len(self._running)) if i != victim])
            request._kv_len = 0
            with self._lock:
                self._waiting.appendleft(request)

    def _remove_rows(self, keep: List[int]) -> None:
        self._running = [self._running[i] for i in keep]
        if not self._running:
            self._cache, self._mask = None, None
        else:
            self._cache, self._mask = _select(self._cache, self._mask, keep)
            self._trim()
        self._publish_stats()

    def _trim(self) -> None:
        """Drop left columns that are padding in every row."""
        used = self._mask.any(dim=0)
        first = int(used.to(torch.int8).argmax()) if bool(used.any()) else self._mask.shape[1]
        if first > 0:
            self._mask = self._mask[:, first:]
            for layer in self._cache.layers:
                layer.keys = layer.keys[:, :, first:]
                layer.values = layer.values[:, :, first:]

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
        aborted = 0
        with self._lock:
            waiting = [r for r in self._waiting if abort_all or r.rid == rid]
            for request in waiting:
                self._waiting.remove(request)
        for request in waiting:
            self._finish(request, {"type": protocol.FINISH_ABORT, "message": message})
            aborted += 1
        hit = [i for i, r in enumerate(self._running) if abort_all or r.rid == rid]
        if hit:
            victims = [self._running[i] for i in hit]
            self._remove_rows([i for i in range(len(self._running)) if i not in hit])
            for request in victims:
                self._finish(request, {"type": protocol.FINISH_ABORT, "message": message})
                aborted += 1
        return aborted

    def _pause(self, mode: str) -> int:
        self._paused = True
        if mode == protocol.PAUSE_ABORT:
            return self._abort("", True, "Aborted by pause_generation(mode='abort').")
        if mode == protocol.PAUSE_RETRACT:
            retracted = list(self._running)
            self._remove_rows([])
            with self._lock:
                for request in reversed(retracted):
                    request._kv_len = 0
                    self._waiting.appendleft(request)
            return len(retracted)
        return len(self._running)

    def _resume(self) -> None:
        self._paused = False

    def _update_weights(self, state_dict: Dict[str, torch.Tensor], weight_version: Optional[str],
                        abort_all_requests: bool) -> Tuple[int, List[str]]:
        if abort_all_requests:
            self._abort("", True, "Aborted by update_weights_from_disk(abort_all_requests=True).")
        # state_dict(keep_vars) names tied aliases too (lm_head.weight -> embed_tokens).
        params = self.model.state_dict(keep_vars=True)
        unknown = [k for k in state_dict if k not in params]
        if unknown:
            raise ValueError(f"checkpoint has tensors the model lacks: {unknown[:5]}")
        for name, tensor in state_dict.items():
            target = params[name]
            if tuple(target.shape) != tuple(tensor.shape):
                raise ValueError(f"shape mismatch for {name}: model {tuple(target.shape)}, "
                                 f"checkpoint {tuple(tensor.shape)}")
        with torch.no_grad():
            for name, tensor in state_dict.items():
                params[name].copy_(tensor.to(params[name].dtype))
        self.prefix_cache.clear()  # its KV came from the old weights
        loaded = {id(params[k]) for k in state_dict}
        missing = [k for k, v in params.items() if id(v) not in loaded]
        if weight_version is not None:
            self.weight_version = str(weight_version)
        paused = len(self._running) + len(self._waiting) if self._paused else 0
        return paused, missing

    def _fail_all(self, message: str) -> None:
        with self._lock:
            waiting = list(self._waiting)
            self._waiting.clear()
        for request in waiting + list(self._running):
            if not request.done:
                self._finish(request, {"type": protocol.FINISH_ABORT, "message": message})
        self._running, self._cache, self._mask = [], None, None
        with self._lock:
            commands = list(self._commands)
            self._commands.clear()
        for _, future in commands:
            if not future.done():
                future.set_exception(RuntimeError(message))


def _select(cache: DynamicCache, mask: torch.Tensor, keep: List[int]
            ) -> Tuple[DynamicCache, torch.Tensor]:
    index = torch.tensor(keep, dtype=torch.long, device=mask.device)
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(0, index)
        layer.values = layer.values.index_select(0, index)
    return cache, mask.index_select(0, index)


def _left_pad(tensor: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    missing = width - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)
