"""KV of finished requests, kept so the next turn of a conversation does not re-prefill it.

An agent's turn t+1 sends the whole conversation again: turn t's prompt and reply plus a new
observation. Without a cache the server recomputes the KV of every earlier token each turn; with
it, a request whose prompt starts with a finished request's tokens reuses that KV and prefills
only the rest (SGLang's radix cache does the same by default). Entries are whole sequences, not a
radix tree: agent turns extend exactly one earlier sequence, so the longest stored prefix is the
one to take.

The KV was computed by the weights of its time, so a weight update must `clear()` the cache (as
SGLang flushes its radix cache), or a request would mix two versions without its tokens saying
so. Capacity is counted in tokens; the least recently used entries go first.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import List, Optional, Sequence, Tuple

import torch

# Per layer: (keys, values), each [kv_heads, tokens, head_dim].
LayerKV = List[Tuple[torch.Tensor, torch.Tensor]]


class PrefixCache:
    def __init__(self, max_tokens: int):
        if max_tokens < 0:
            raise ValueError(f"prefix cache size must be >= 0 tokens, got {max_tokens}")
        self.max_tokens = max_tokens
        self._entries: "OrderedDict[Tuple[int, ...], LayerKV]" = OrderedDict()
        self.tokens = 0
        self.hits = 0
        self.misses = 0
        self.hit_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, tokens: Sequence[int], layers: LayerKV) -> None:
        """Keep the KV of `tokens` (each layer's tensors hold exactly len(tokens) positions)."""
        key = tuple(tokens)
        if not key or len(key) > self.max_tokens:
            return
        if any(k.shape[1] != len(key) or v.shape[1] != len(key) for k, v in layers):
            raise ValueError(f"prefix cache entry of {len(key)} tokens got KV of another length")
        # An entry this one extends is now redundant: its every match is also a match here.
        for old in [k for k in self._entries if len(k) <= len(key) and key[:len(k)] == k]:
            self._drop(old)
        self._entries[key] = [(k.detach().clone(), v.detach().clone()) for k, v in layers]
        self.tokens += len(key)
        while self.tokens > self.max_tokens:
            self._drop(next(iter(self._entries)))

    def match(self, prompt: Sequence[int]) -> Tuple[int, Optional[LayerKV]]:
        """(n, KV of the first n tokens) for the longest stored prefix of `prompt`, leaving at least
        one token to prefill (its logits start the generation); (0, None) when none matches."""
        best: Optional[Tuple[int, ...]] = None
        for key in self._entries:
            n = min(len(key), len(prompt) - 1)
            if n > 0 and (best is None or n > min(len(best), len(prompt) - 1)) and \
                    tuple(prompt[:n]) == key[:n]:
                best = key
        if best is None:
            self.misses += 1
            return 0, None
        self._entries.move_to_end(best)
        n = min(len(best), len(prompt) - 1)
        self.hits += 1
        self.hit_tokens += n
        return n, [(k[:, :n], v[:, :n]) for k, v in self._entries[best]]

    def clear(self) -> int:
        dropped = len(self._entries)
        self._entries.clear()
        self.tokens = 0
        return dropped

    def _drop(self, key: Tuple[int, ...]) -> None:
        del self._entries[key]
        self.tokens -= len(key)
