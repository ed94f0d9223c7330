"""The device a GPU role computes on: the one GPU it was given, never a guess.

Ray sets CUDA_VISIBLE_DEVICES of an actor that asks for GPUs to exactly its own (actors/cluster/placement.py
asks one per trainer shard), so inside the process that GPU is cuda:0. A process that sees several
GPUs was started outside the placement plan: `torch.cuda.current_device()` would answer 0 in every
such process and put them all on one GPU, so that is refused with the cause instead.
"""
from __future__ import annotations

import os

import torch


def role_device() -> torch.device:
    """cuda:0 (made current) when this process sees exactly one GPU, the CPU when it sees none."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if count != 1:
        raise RuntimeError(
            f"this trainer process sees {count} GPUs (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}); a trainer shard must see exactly its own "
            "one: start it through actors/fleet/launch.py (the placement plan asks Ray for one GPU per shard)")
    torch.cuda.set_device(0)
    return torch.device("cuda", 0)
