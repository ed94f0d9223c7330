"""GRPO group advantages: how good each member of a group was compared with its siblings.

The value each trajectory carries into `grpo_loss` (policies/training/losses.py) as its advantage; the
sample collector (actors/training/sample_collector.py) calls this once per group it puts in a batch.
"""
from __future__ import annotations

from typing import Sequence

from configs.schema import RolloutConfig

# Keeps the division finite when every reward is equal (std 0).
STD_EPS = 1e-6


def group_advantages(rewards: Sequence[float],
                     normalize_std: bool = RolloutConfig.normalize_advantage_std) -> list[float]:
    """One advantage per reward, in the same order: A_i = r_i - mean(r).

    With `normalize_std` (rollout.normalize_advantage_std) and more than one member, each is then
    divided by (std + STD_EPS), where std is the sample standard deviation
    sqrt(sum_i A_i^2 / (n - 1)); otherwise the raw differences are returned.

    - Identical rewards (any value, 0, 1 or fractional): every advantage is 0, normalised or not,
      so the group adds no learning signal. Exactly 0 unless the mean does not round-trip in floats
      (three rewards of 0.1 give -1.4e-17 each, -1.4e-11 normalised): nothing here snaps them.
    - Fractional rewards (Harbor tasks give rewards in [0, 1]) enter as they are; nothing is
      thresholded or binarised.
    - One member: [0.0] (it is its own mean; no normalisation). No members: [].
    - Which members count is the caller's choice: the collector passes the members it trains, so
      infra-error attempts (never group members: they are re-run or quarantine the task) and
      members dropped as too stale are not part of the mean.
    """
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    advantages = [r - mean for r in rewards]
    if normalize_std and len(rewards) > 1:
        std = (sum(a * a for a in advantages) / (len(rewards) - 1)) ** 0.5
        advantages = [a / (std + STD_EPS) for a in advantages]
    return advantages
