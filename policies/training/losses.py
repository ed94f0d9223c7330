"""Token-level GRPO loss with decoupled PPO (proximal vs behavior policy).

Three policies meet here: the current one being optimised (`logprobs`), the proximal one
recomputed by the trainer before the update (`old_logprobs`, the clip anchor), and the
behavior one the engine sampled with (`behavior_logprobs`, possibly several versions
older). The clip keeps the update near the proximal policy; the truncated importance
weight exp(old - behavior) corrects for having sampled from a staler policy.
"""
from __future__ import annotations

import typing
from typing import Dict, Optional, Tuple

import torch

from configs.schema import LossAggregation, TrainerConfig

AGGREGATIONS = typing.get_args(LossAggregation)  # trainer.loss_aggregation's values


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    clip_eps_low: float = TrainerConfig.clip_eps_low,
    clip_eps_high: float = TrainerConfig.clip_eps_high,
    behavior_logprobs: Optional[torch.Tensor] = None,
    tis_cap: float = TrainerConfig.tis_cap,
    ref_logprobs: Optional[torch.Tensor] = None,
    kl_coef: float = TrainerConfig.kl_coef,
    num_tokens: Optional[int] = None,
    aggregation: str = TrainerConfig.loss_aggregation,
    num_sequences: Optional[int] = None,
) -> Tuple[torch.Tensor, Dict[str, float]]:
    """Return (loss, stats). Shapes: [B, T] per-token tensors, advantages [B].

    aggregation "token_mean": the sum over masked tokens divided by `num_tokens` (the global
    count, when data-parallel shards each hold part of a batch) or by this mask's token count;
    every token weighs the same, so long trajectories weigh more. "seq_mean": each row's mean
    over its own masked tokens, summed and divided by `num_sequences` (global) or by the rows;
    every trajectory weighs the same, so a group's zero-sum advantages leave tokens that all its
    members share (the reply format, common commands) with no net push.
    """
    mask = loss_mask.to(logprobs.dtype)
    old_logprobs = old_logprobs.detach()
    advantage = advantages.detach().to(logprobs.dtype).unsqueeze(-1)

    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantage * ratio
    clipped = -advantage * torch.clamp(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high)
    per_token = torch.maximum(unclipped, clipped)

    if behavior_logprobs is not None:
        tis_weight = torch.exp(old_logprobs - behavior_logprobs.detach()).clamp(max=tis_cap)
        per_token = per_token * tis_weight
    else:
        tis_weight = torch.ones_like(logprobs)

    if ref_logprobs is not None and kl_coef != 0.0:
        # k3 estimator of KL(current || ref): unbiased, always >= 0.
        log_ratio_ref = ref_logprobs.detach() - logprobs
        kl = torch.exp(log_ratio_ref) - log_ratio_ref - 1.0
        per_token = per_token + kl_coef * kl
    else:
        kl = torch.zeros_like(logprobs)

    if aggregation == "token_mean":
        denominator = float(num_tokens) if num_tokens is not None else mask.sum().clamp(min=1.0)
        loss = (per_token * mask).sum() / denominator
    elif aggregation == "seq_mean":
        per_row = (per_token * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)
        loss = per_row.sum() / float(num_sequences if num_sequences is not None else max(len(per_row), 1))
    else:
        raise ValueError(f"loss aggregation '{aggregation}'; allowed: {', '.join(AGGREGATIONS)}")

    with torch.no_grad():
        local_tokens = mask.sum().clamp(min=1.0)

        def masked_mean(values: torch.Tensor) -> float:
            return float((values * mask).sum() / local_tokens)

        stats = {
            "clip_fraction": masked_mean((clipped > unclipped).to(mask.dtype)),
            "ratio_mean": masked_mean(ratio),
            "ratio_max": float(ratio[mask > 0].max()) if bool((mask > 0).any()) else 1.0,
            "kl": masked_mean(kl),
            "tis_mean": masked_mean(tis_weight),
        }
    return loss, stats
