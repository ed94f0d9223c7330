"""grpo_loss against numbers worked out by hand.

Shared setup: old_logprobs = 0, so ratio = exp(logprobs); eps 0.2 / 0.28 clip the ratio
to [0.8, 1.28]. Token 1 has ratio 1.5, token 2 ratio 0.9, token 3 is masked out and
carries absurd values that must not matter.
"""
import math

import pytest
import torch

from policies.training.losses import grpo_loss

MASK = torch.tensor([[1.0, 1.0, 0.0]])
OLD = torch.zeros(1, 3)


def _logprobs(requires_grad: bool = False) -> torch.Tensor:
    return torch.tensor([[math.log(1.5), math.log(0.9), 50.0]], requires_grad=requires_grad)


def _close(value, expected):
    assert abs(float(value) - expected) < 1e-5, (float(value), expected)


def test_positive_advantage_clips_high_ratio():
    # A = +1: token 1 max(-1.5, -1.28) = -1.28 (clipped); token 2 max(-0.9, -0.9) = -0.9.
    loss, stats = grpo_loss(_logprobs(), OLD, torch.tensor([1.0]), MASK)
    _close(loss, (-1.28 - 0.9) / 2)
    _close(stats["clip_fraction"], 0.5)
    _close(stats["ratio_mean"], (1.5 + 0.9) / 2)
    _close(stats["kl"], 0.0)
    _close(stats["tis_mean"], 1.0)


def test_negative_advantage_clips_low_ratio():
    # A = -1, ratios 1.5 and 0.5: token 1 max(1.5, 1.28) = 1.5; token 2 max(0.5, 0.8) = 0.8.
    logprobs = torch.tensor([[math.log(1.5), math.log(0.5), -50.0]])
    loss, stats = grpo_loss(logprobs, OLD, torch.tensor([-1.0]), MASK)
    _close(loss, (1.5 + 0.8) / 2)
    _close(stats["clip_fraction"], 0.5)


def test_asymmetric_eps_are_used():
    loss, _ = grpo_loss(_logprobs(), OLD, torch.tensor([1.0]), MASK,
                        clip_eps_low=0.1, clip_eps_high=0.4)
    _close(loss, (-1.4 - 0.9) / 2)


def test_num_tokens_sets_the_denominator():
    loss, _ = grpo_loss(_logprobs(), OLD, torch.tensor([1.0]), MASK, num_tokens=4)
    _close(loss, (-1.28 - 0.9) / 4)


def test_truncated_importance_weights():
    # exp(old - behavior) = 0.5 and 3.0, the latter capped at 2.0.
    behavior = torch.tensor([[math.log(2.0), math.log(1.0 / 3.0), 9.0]])
    loss, stats = grpo_loss(_logprobs(), OLD, torch.tensor([1.0]), MASK,
                            behavior_logprobs=behavior, tis_cap=2.0)
    _close(loss, (-1.28 * 0.5 + -0.9 * 2.0) / 2)
    _close(stats["tis_mean"], (0.5 + 2.0) / 2)


def test_k3_kl_to_reference():
    # ref = 0: k3 = exp(-lp) + lp - 1 = 1/r + ln r - 1.
    kl_1 = 1 / 1.5 + math.log(1.5) - 1  # 0.0721
    kl_2 = 1 / 0.9 + math.log(0.9) - 1  # 0.0058
    loss, stats = grpo_loss(_logprobs(), OLD, torch.tensor([1.0]), MASK,
                            ref_logprobs=torch.zeros(1, 3), kl_coef=0.1)
    _close(loss, (-1.28 - 0.9 + 0.1 * (kl_1 + kl_2)) / 2)
    _close(stats["kl"], (kl_1 + kl_2) / 2)


def test_gradient_sign_and_masking():
    logprobs = _logprobs(requires_grad=True)
    loss, _ = grpo_loss(logprobs, OLD, torch.tensor([1.0]), MASK)
    loss.backward()
    # Clipped token: no gradient. Unclipped token: d/dlp (-r / 2) = -0.9 / 2, so a step
    # down the gradient raises the log-prob of a positively rewarded token.
    _close(logprobs.grad[0, 0], 0.0)
    _close(logprobs.grad[0, 1], -0.45)
    _close(logprobs.grad[0, 2], 0.0)


def test_masked_tokens_contribute_nothing():
    base, _ = grpo_loss(_logprobs(), OLD, torch.tensor([1.0]), MASK)
    changed = _logprobs()
    changed[0, 2] = -123.0
    other_old = OLD.clone()
    other_old[0, 2] = 77.0
    again, _ = grpo_loss(changed, other_old, torch.tensor([1.0]), MASK,
                         behavior_logprobs=torch.zeros(1, 3))
    _close(again, float(base))


def test_advantage_broadcasts_per_sequence():
    logprobs = torch.zeros(2, 2)
    loss, _ = grpo_loss(logprobs, torch.zeros(2, 2), torch.tensor([1.0, -3.0]), torch.ones(2, 2))
    _close(loss, (-1 - 1 + 3 + 3) / 4)


def test_seq_mean_weighs_every_trajectory_the_same():
    # Row 0 (A = +1) has two tokens, as in the first test: mean (-1.28 - 0.9) / 2. Row 1 (A = -1)
    # has one token at ratio 1: 1.0. token_mean would give (-1.28 - 0.9 + 1.0) / 3.
    logprobs = torch.tensor([[math.log(1.5), math.log(0.9), 50.0], [0.0, 7.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    advantages = torch.tensor([1.0, -1.0])
    loss, _ = grpo_loss(logprobs, torch.zeros(2, 3), advantages, mask, aggregation="seq_mean")
    _close(loss, ((-1.28 - 0.9) / 2 + 1.0) / 2)
    token, _ = grpo_loss(logprobs, torch.zeros(2, 3), advantages, mask)
    _close(token, (-1.28 - 0.9 + 1.0) / 3)


def test_seq_mean_divides_by_the_global_number_of_sequences():
    loss, _ = grpo_loss(_logprobs(), OLD, torch.tensor([1.0]), MASK, aggregation="seq_mean", num_sequences=4)
    _close(loss, (-1.28 - 0.9) / 2 / 4)


def test_unknown_aggregation_names_the_choices():
    with pytest.raises(ValueError, match="allowed: token_mean, seq_mean"):
        grpo_loss(_logprobs(), OLD, torch.tensor([1.0]), MASK, aggregation="sum")
