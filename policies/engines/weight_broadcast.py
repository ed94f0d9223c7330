"""Weight sync to SGLang engines by NCCL broadcast (`update_weights_from_distributed`).

SGLang's side (per engine, on `/init_weights_update_group`): every engine GPU joins a process
group of `world_size` ranks at `rank_offset + tp_rank`, created with its own TCP store at
`master_address:master_port` (prefixed by the group name), not the default group. On each
`/update_weights_from_distributed {names, dtypes, shapes}` it allocates one tensor per name and
receives it with `broadcast(src=0)` in the order of `names`, then loads them.

This module is the trainer's side: rank 0 of that group (`init_weight_update_group`), and
`broadcast_weights_nccl`, which sends tensors in buckets: per bucket it first announces
names/dtypes/shapes (the caller's `announce`, which starts the engines' HTTP calls and returns
something to wait on), then broadcasts every tensor of the bucket in that order, then waits for
the engines to confirm. The engine call must be under way before its tensors arrive; the
broadcasts simply block until the receivers post theirs.
"""
from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, Callable, Iterable, Optional

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from configs.schema import DeadlinesConfig, TrainerConfig
from policies.device import role_device
from policies.engines.protocol import WEIGHT_UPDATE_GROUP


def init_weight_update_group(master_address: str, master_port: int, world_size: int, rank: int = 0,
                             group_name: str = WEIGHT_UPDATE_GROUP, backend: str = "nccl",
                             timeout_s: float = DeadlinesConfig.weight_sync_s) -> dist.ProcessGroup:
    """Create (rank 0: host the store of) a process group apart from the training group, the
    way SGLang's `init_custom_process_group` does, so both sides meet on the same store keys."""
    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore(master_address, int(master_port), world_size, is_master=(rank == 0),
                          timeout=timeout, wait_for_workers=False)
    store = dist.PrefixStore(group_name, store)
    options: dict[str, Any] = {"timeout": timeout}
    if backend == "nccl":
        options["device_id"] = role_device()
    group, _ = c10d._new_process_group_helper(world_size, rank, [], backend, store,
                                               group_name=group_name, **options)
    c10d._world.pg_group_ranks[group] = {i: i for i in range(world_size)}
    return group


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def buckets(named: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int):
    bucket, size = [], 0
    for name, tensor in named:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


def broadcast_weights_nccl(named: Iterable[tuple[str, torch.Tensor]], group: dist.ProcessGroup,
                           announce: Callable[[list, list, list], Any],
                           wait: Optional[Callable[[Any], Any]] = None,
                           bucket_bytes: int = TrainerConfig.weight_bucket_mb << 20, device: Optional[torch.device] = None,
                           dtype: Optional[torch.dtype] = None) -> dict:
    """Broadcast (name, tensor) pairs from this process (rank 0 of `group`) to the engines.

    announce(names, dtypes, shapes) starts the receivers for one bucket and returns a handle;
    wait(handle) blocks until they loaded it (default: nothing to wait for). Tensors are moved
    to `device` (default: the current CUDA device) and cast to `dtype` when given."""
    if device is None:
        device = role_device()
    started = time.perf_counter()
    sent_bytes, calls = 0, 0
    for bucket in buckets(named, bucket_bytes):
        tensors = [t.detach().to(device=device, dtype=dtype or t.dtype).contiguous() for _, t in bucket]
        handle = announce([n for n, _ in bucket], [dtype_name(t.dtype) for t in tensors],
                          [list(t.shape) for t in tensors])
        works = [dist.broadcast(t, src=0, group=group, async_op=True) for t in tensors]
        for work in works:
            work.wait()
        if wait is not None:
            wait(handle)
        sent_bytes += sum(t.numel() * t.element_size() for t in tensors)
        calls += 1
    return {"time_broadcast_s": time.perf_counter() - started, "bytes": sent_bytes, "calls": calls}
