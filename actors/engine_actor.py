"""EngineActor, CPU backend: batched, KV-cached generation in this process.

Requests from many episodes arrive concurrently (Ray runs this actor threaded); a worker
thread gathers whatever is waiting into one decoding batch. Weight updates take the same
lock as a decoding step, so they land between steps and every token carries the version
of the weights that produced it.
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time
from concurrent.futures import Future

import torch

from configs.schema import EngineConfig
from policies.model import load_model
from policies.sampler import SampleOutput, SampleRequest, generate_batch


class EngineActor:
    def __init__(self, index: int, cfg: EngineConfig, model_path: str):
        torch.set_num_threads(cfg.torch_threads)
        self.index = index
        self.cfg = cfg
        self.model = load_model(model_path)
        self._version = 0
        self._lock = threading.Lock()
        self._queue: "queue.Queue[tuple[SampleRequest, Future]]" = queue.Queue()
        self._running = 0
        self._kv_tokens = 0
        self._kv_peak_tokens = 0
        self._served = 0
        self._worker = threading.Thread(target=self._serve, name=f"engine-{index}", daemon=True)
        self._worker.start()

    # -- requests ---------------------------------------------------------------------
    def generate(self, request: SampleRequest) -> SampleOutput:
        room = self.cfg.max_context_tokens - len(request.prompt_ids)
        if room <= 0:
            # The context cap is per request: one runaway conversation cannot grow the batch's KV.
            return SampleOutput([], [], [], "length")
        if request.max_new_tokens > room:
            request = SampleRequest(request.prompt_ids, room, request.temperature, request.top_p,
                                    request.stop_token_ids, request.seed)
        done: Future = Future()
        self._queue.put((request, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            batch = [self._queue.get()]
            deadline = time.monotonic() + self.cfg.batch_wait_s
            while len(batch) < self.cfg.max_batch_size:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    batch.append(self._queue.get(timeout=remaining))
                except queue.Empty:
                    break
            requests = [r for r, _ in batch]
            self._running = len(batch)
            self._kv_tokens = sum(len(r.prompt_ids) + r.max_new_tokens for r in requests)
            self._kv_peak_tokens = max(self._kv_peak_tokens, self._kv_tokens)
            try:
                outputs = generate_batch(self.model, requests, self._step_guard)
            except Exception as err:  # noqa: BLE001 - handed to every waiting caller, not swallowed
                for _, done in batch:
                    done.set_exception(err)
            else:
                for (_, done), out in zip(batch, outputs):
                    done.set_result(out)
                self._served += len(batch)
            finally:
                self._running = 0
                self._kv_tokens = 0

    @contextlib.contextmanager
    def _step_guard(self):
        with self._lock:
            yield self._version

    # -- weights ----------------------------------------------------------------------
    def update_weights(self, state_dict: dict, version: int) -> int:
        """Load new weights between decoding steps; returns the version now served."""
        with self._lock:
            self.model.load_state_dict(state_dict)
            self._version = version
        return self._version

    def version(self) -> int:
        return self._version

    def stats(self, reset_peak: bool = False) -> dict:
        capacity = self.cfg.max_batch_size * self.cfg.max_context_tokens
        stats = {
            "index": self.index,
            "version": self._version,
            "running": self._running,
            "queued": self._queue.qsize(),
            "served": self._served,
            "kv_usage": self._kv_tokens / capacity,
            "kv_usage_peak": self._kv_peak_tokens / capacity,
        }
        if reset_peak:
            self._kv_peak_tokens = self._kv_tokens
        return stats
