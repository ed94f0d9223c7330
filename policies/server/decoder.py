"""The model's side of continuous batching: prefill requests into the running batch, decode one
token for every running row, sample, and hand back the rows that finished.

Called from the scheduler's thread only (policies/server/scheduler.py owns the queue, the
commands and the request lifecycle). A row that finishes on its own leaves its KV in the prefix
cache for its conversation's next turn before the scheduler tells its caller.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Iterable, List, Tuple

import torch
from transformers import PreTrainedModel

from policies.server.sampler import cache_kwarg, pick_tokens
from policies.server.kv_batch import RunningBatch, past_kv, row_kv
from policies.server.prefix_cache import PrefixCache
from policies.server.request import Request, stop_reason

log = logging.getLogger(__name__)
# A request and its finish reason (protocol.FINISH_STOP / FINISH_LENGTH).
Finished = Tuple[Request, Dict[str, Any]]


class Decoder:
    def __init__(self, model: PreTrainedModel, eos_token_ids: Iterable[int], prefix_cache_tokens: int):
        self.model = model
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        self.batch = RunningBatch()
        # KV of finished requests for the next turn of their conversation (0 tokens: off).
        self.prefix_cache = PrefixCache(prefix_cache_tokens)
        self.device = model.get_input_embeddings().weight.device
        self._pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
        self._cache_kwarg = cache_kwarg(model)

    @torch.no_grad()
    def prefill(self, requests: List[Request], version: Any) -> List[Finished]:
        """One forward over the requests' tokens so far (prompt + any output: a retracted request
        is re-prefilled), reusing prefix-cache hits; samples each one's next token. The rows
        that go on join the running batch."""
        sequences = [r.tokens for r in requests]
        cached = [self.prefix_cache.match(seq) if self.prefix_cache.max_tokens else (0, None)
                  for seq in sequences]
        cache, past_mask = past_kv(self.model.config, self.device, cached)
        # Each row: [left padding | its cached prefix | left padding | the tokens to prefill].
        fresh = [seq[n:] for seq, (n, _) in zip(sequences, cached)]
        width = max(len(s) for s in fresh)
        rows = len(requests)
        input_ids = torch.full((rows, width), self._pad_id, dtype=torch.long, device=self.device)
        new_mask = torch.zeros((rows, width), dtype=torch.long, device=self.device)
        position_ids = torch.zeros((rows, width), dtype=torch.long, device=self.device)
        for row, (seq, (n, _)) in enumerate(zip(fresh, cached)):
            input_ids[row, width - len(seq):] = torch.tensor(seq, device=self.device)
            new_mask[row, width - len(seq):] = 1
            position_ids[row, width - len(seq):] = torch.arange(n, n + len(seq), device=self.device)
        mask = torch.cat([past_mask, new_mask], dim=1)
        logits = self.model(
            input_ids=input_ids, attention_mask=mask, position_ids=position_ids,
            use_cache=True, logits_to_keep=1, **{self._cache_kwarg: cache},
        ).logits[:, -1].float()
        for request, sequence in zip(requests, sequences):
            request._kv_len = len(sequence)
        keep, finished = self._sample(requests, logits, cache, mask, version)
        if keep:  # rows finished by their first token never join
            self.batch.add(requests, keep, cache, mask)
        return finished

    @torch.no_grad()
    def decode(self, version: Any) -> List[Finished]:
        """One forward for every running row (input: its last token, position: its own length)."""
        rows = self.batch.requests
        input_ids = torch.tensor([[r.output_ids[-1]] for r in rows], dtype=torch.long, device=self.device)
        position_ids = torch.tensor([[r._kv_len] for r in rows], dtype=torch.long, device=self.device)
        mask = self.batch.open_column()
        logits = self.model(
            input_ids=input_ids, attention_mask=mask, position_ids=position_ids,
            use_cache=True, logits_to_keep=1, **{self._cache_kwarg: self.batch.cache},
        ).logits[:, -1].float()
        for r in rows:
            r._kv_len += 1
        keep, finished = self._sample(rows, logits, self.batch.cache, mask, version)
        if len(keep) < len(rows):
            self.batch.keep(keep)
        return finished

    def retract_over(self, max_total_tokens: int,
                     victim: Callable[[List[Request]], int] = lambda rows: len(rows) - 1) -> List[Request]:
        """Decode growth past the KV pool (possible only when max_total_tokens is below
        max_batch_size * max_context_tokens): rows leave one at a time, `victim` choosing which
        (default the newest, as SGLang retracts); the caller queues them to be re-prefilled
        from their tokens so far."""
        retracted = []
        while len(self.batch) > 1 and sum(r._kv_len + 2 for r in self.batch.requests) > max_total_tokens:
            retracted.append(self.retract(victim(self.batch.requests)))
        return retracted

    def retract(self, index: int) -> Request:
        """Row `index` leaves the batch with its KV (recomputed when it is admitted again)."""
        request = self.batch.requests[index]
        self.batch.keep([i for i in range(len(self.batch)) if i != index])
        request._kv_len = 0
        return request

    def load_weights(self, state_dict: Dict[str, torch.Tensor]) -> List[str]:
        """Copy new weights into the model (every tensor checked first: nothing is copied when
        one does not fit). Returns the model tensors the state dict did not hold."""
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
        return [k for k, v in params.items() if id(v) not in loaded]

    def _sample(self, rows: List[Request], logits: torch.Tensor, cache, mask: torch.Tensor,
                version: Any) -> Tuple[List[int], List[Finished]]:
        """One token per row, tagged with `version`. Returns (indices of the rows that go on,
        the rows that finished); a finished row's KV (row i of cache / mask) goes to the prefix cache."""
        keep: List[int] = []
        finished: List[Finished] = []
        picks = pick_tokens(logits, [r.params.temperature for r in rows], [r.params.top_p for r in rows],
                            [r._generator for r in rows])
        for i, (request, (token, logprob)) in enumerate(zip(rows, picks)):
            request.output_ids.append(token)
            request.logprobs.append(logprob)
            request.versions.append(version)
            reason = stop_reason(request, token, self.eos_token_ids)
            if request.on_token is not None:
                try:
                    request.on_token(request)
                except Exception:  # a broken listener must not kill the scheduler; it is dropped
                    log.exception("on_token callback of request %s failed", request.rid)
                    request.on_token = None
            if reason is None:
                keep.append(i)
                continue
            if self.prefix_cache.max_tokens:
                layers = row_kv(cache, mask, i)
                tokens = request.tokens[: request._kv_len]
                if layers and layers[0][0].shape[1] == len(tokens):
                    self.prefix_cache.put(tokens, layers)
            finished.append((request, reason))
        return keep, finished
