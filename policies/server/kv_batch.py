"""The running batch's KV: one left-padded cache for every row, rows joining and leaving.

An HF `DynamicCache` whose per-layer tensors are [rows, kv_heads, width, head_dim], plus a
[rows, width] attention mask (1 where a row holds a real token's KV). Rows are left-padded so
every row's next input goes in the same, last column. A row holds the KV of every token of its
sequence but the last sampled one, which is the row's next input.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch
from transformers import DynamicCache

from policies.server.request import Request

# KV of one sequence as the prefix cache keeps it: per layer (keys, values), each
# [kv_heads, tokens, head_dim], no padding.
Layers = List[Tuple[torch.Tensor, torch.Tensor]]


class RunningBatch:
    def __init__(self) -> None:
        self.requests: List[Request] = []
        self.cache: Optional[DynamicCache] = None
        self.mask: Optional[torch.Tensor] = None

    def __len__(self) -> int:
        return len(self.requests)

    def kv_tokens(self) -> int:
        """KV slots the batch uses: each row's KV plus its pending input token."""
        return sum(r._kv_len + 1 for r in self.requests)

    def add(self, rows: List[Request], keep: List[int], cache: DynamicCache, mask: torch.Tensor) -> None:
        """Join rows[i] for i in keep, whose KV is row i of a prefill's `cache` / `mask`."""
        if len(keep) < len(rows):
            cache, mask = _select(cache, mask, keep)
        new_rows = [rows[i] for i in keep]
        if self.cache is None or not self.requests:
            self.cache, self.mask, self.requests = cache, mask, new_rows
            self._trim()
            return
        width = max(self.mask.shape[1], mask.shape[1])
        for old, new in zip(self.cache.layers, cache.layers):
            old.keys = torch.cat([_left_pad(old.keys, width, 2), _left_pad(new.keys, width, 2)])
            old.values = torch.cat([_left_pad(old.values, width, 2), _left_pad(new.values, width, 2)])
        self.mask = torch.cat([_left_pad(self.mask, width, 1), _left_pad(mask, width, 1)])
        self.requests = self.requests + new_rows
        self._trim()

    def keep(self, indices: Sequence[int]) -> None:
        """Keep only these rows (in this order); the others leave with their KV."""
        self.requests = [self.requests[i] for i in indices]
        if not self.requests:
            self.cache, self.mask = None, None
            return
        self.cache, self.mask = _select(self.cache, self.mask, list(indices))
        self._trim()

    def clear(self) -> None:
        self.requests, self.cache, self.mask = [], None, None

    def open_column(self) -> torch.Tensor:
        """The mask with one more column for the decode step's inputs (one token per row)."""
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(self.requests), 1)], dim=1)
        return self.mask

    def _trim(self) -> None:
        """Drop left columns that are padding in every row (left behind by rows that left)."""
        used = self.mask.any(dim=0)
        first = int(used.to(torch.int8).argmax()) if bool(used.any()) else self.mask.shape[1]
        if first > 0:
            self.mask = self.mask[:, first:]
            for layer in self.cache.layers:
                layer.keys = layer.keys[:, :, first:]
                layer.values = layer.values[:, :, first:]


def past_kv(model_config: Any, device: torch.device, cached: List[Tuple[int, Optional[Layers]]]
            ) -> Tuple[DynamicCache, torch.Tensor]:
    """A batch cache holding each row's cached prefix ((tokens, layers) from the prefix cache;
    0 tokens: none), left-padded to the longest, and its [rows, width] mask (width 0 when
    nothing was cached)."""
    cache = DynamicCache(config=model_config)
    width = max(n for n, _ in cached)
    mask = torch.zeros((len(cached), width), dtype=torch.long, device=device)
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


def row_kv(cache: DynamicCache, mask: torch.Tensor, row: int) -> Layers:
    """One row's KV without its padding columns: what the prefix cache stores."""
    columns = mask[row].bool()
    return [(layer.keys[row][:, columns], layer.values[row][:, columns]) for layer in cache.layers]


def _select(cache: DynamicCache, mask: torch.Tensor, keep: List[int]) -> Tuple[DynamicCache, torch.Tensor]:
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
