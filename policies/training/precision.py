"""Mixed precision where the hardware pays for it: matmuls in bf16 under autocast, weights,
gradients and optimizer state in fp32.

On a CPU with AMX (or AVX512-BF16) a bf16 matmul of the default model's shapes ran 26x faster than
fp32 (2026-12-05, the 2-core machine: 1,863 vs 70 GFLOP/s) and SFT on the default run's traces 1.46x
(1.70 vs 1.17 steps/s: attention's backward and the element-wise ops do not speed up); on a CPU without them bf16 is emulated and
slower than fp32. So `auto` measures this process's device once instead of trusting a list of CPU
flags, and a CUDA device asks CUDA.
"""
from __future__ import annotations

import contextlib
import functools
import time
from typing import ContextManager

import torch

from configs.schema.trainer import MixedPrecision

# bf16 is used only when its matmul is at least this many times faster than fp32's: autocast costs
# casts and keeps attention and element-wise ops near fp32 speed, so a small matmul gain is a loss.
MIN_MATMUL_SPEEDUP = 4.0


def _best_matmul_s(a: torch.Tensor, b: torch.Tensor, repetitions: int = 5) -> float:
    a @ b  # first call: kernel choice and buffers
    times = []
    for _ in range(repetitions):
        started = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - started)
    return min(times)


@functools.lru_cache(maxsize=None)
def bf16_pays_off(device_type: str) -> bool:
    """Whether bf16 matmuls on this device are MIN_MATMUL_SPEEDUP x faster than fp32 (measured
    once per process on CPU: ~50 ms)."""
    if device_type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device_type != "cpu":
        return False
    a, b = torch.randn(512, 256), torch.randn(256, 768)
    fp32_s = _best_matmul_s(a, b)
    bf16_s = _best_matmul_s(a.bfloat16(), b.bfloat16())
    return bf16_s * MIN_MATMUL_SPEEDUP <= fp32_s


def use_bf16(mode: MixedPrecision, device: torch.device) -> bool:
    if mode == "off":
        return False
    if mode == "bf16":
        return True
    if mode == "auto":
        return bf16_pays_off(device.type)
    raise ValueError(f"mixed_precision is {mode!r}; it must be one of auto, off, bf16")


def autocast(enabled: bool, device: torch.device) -> ContextManager:
    """bf16 autocast on `device` when enabled; a no-op context otherwise."""
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)
