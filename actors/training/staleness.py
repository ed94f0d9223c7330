"""What a batch made at a policy version trains of a trajectory, by `rollout.staleness_unit`.

Under `trajectory` a trajectory whose oldest generated token is more than `rollout.max_staleness`
versions behind the batch is dropped whole. Under `token` each generated token more than
max_staleness behind is masked out of the loss (it stays in the context), and a trajectory left
with no trained token is dropped as stale.

Under both, the collector paces: a batch waits for work that the version's next move would drop
whole (`lost_by_next_version`). Under `trajectory` that includes work in flight that started at the
edge (its oldest token is fixed); under `token` only finished work waiting for its group: work in
flight keeps making tokens at the newest version, so the batch never waits for a straggler.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from actors.episodes.trajectory import TrainSample, Trajectory


def stale_token_mask(loss_mask: Sequence[int], versions: Sequence[int], version: int, max_staleness: int) -> list[int]:
    """The loss mask a batch trained at `version` uses under rollout.staleness_unit=token: a
    generated token (mask 1) whose policy version is more than `max_staleness` behind is masked
    out (it stays in the context); tokens exactly `max_staleness` behind are kept."""
    if len(versions) != len(loss_mask):
        raise ValueError(f"{len(versions)} token versions for {len(loss_mask)} tokens: rollout.staleness_unit=token "
                         "needs the policy version of every token (or set rollout.staleness_unit=trajectory)")
    return [int(bool(m) and version - v <= max_staleness) for m, v in zip(loss_mask, versions)]


class StalenessRule:
    """rollout.staleness_unit and rollout.max_staleness, applied at the batch's version."""

    def __init__(self, unit: str, max_staleness: int):
        self.unit = unit
        self.max_staleness = max_staleness

    @property
    def waits_for_work_in_flight(self) -> bool:
        """Whether a batch waits for an episode in flight that started at the staleness edge: under
        `trajectory` the version's move would drop it whole whatever it does next."""
        return self.unit == "trajectory"

    def lost_by_next_version(self, traj: Trajectory, version: int) -> bool:
        """Whether a finished trajectory that a batch at `version` could still train would be
        dropped whole by the next version (under `trajectory`: its oldest generated token is at the
        edge; under `token`: its newest is)."""
        return not self.is_stale(traj, version) and self.is_stale(traj, version + 1)

    def trained_mask(self, traj: Trajectory, version: int) -> list[int]:
        """Which of the trajectory's tokens a batch made at `version` trains."""
        if self.unit == "trajectory":
            return list(traj.loss_mask)
        return stale_token_mask(traj.loss_mask, traj.versions, version, self.max_staleness)

    def is_stale(self, traj: Trajectory, version: int) -> bool:
        """Dropped whole: under `trajectory` its oldest generated token is past the bound; under
        `token` every generated token is (one that generated nothing: its admission version is)."""
        if self.unit == "token" and traj.num_generated:
            return not any(self.trained_mask(traj, version))
        return version - traj.oldest_version > self.max_staleness

    def samples(self, traj: Trajectory, advantage: float, version: int) -> list[TrainSample]:
        """The trajectory's samples with stale tokens masked; a segment left with no trained token
        is not sent (it would only cost a forward pass, and dilute trainer.loss_aggregation=seq_mean's
        per-sequence mean)."""
        samples = traj.samples(advantage)
        if self.unit == "trajectory":
            return samples
        out = []
        for sample in samples:
            mask = stale_token_mask(sample.loss_mask, sample.versions, version, self.max_staleness)
            if any(sample.loss_mask) and not any(mask):
                continue
            out.append(replace(sample, loss_mask=mask))
        return out
