"""Rollout metrics of one batch (names are a contract: docs/contracts.md, "Metrics")."""
from __future__ import annotations

import statistics

from actors.episodes.trajectory import Trajectory, oldest_version
from envs.outcomes import Outcome


def tail_fraction(trajs: list[Trajectory]) -> float | None:
    """Share of the batch's rollout wall time that came after 90% of its trajectories finished."""
    if len(trajs) < 2:
        return None
    start = min(t.started_s for t in trajs)
    ends = sorted(t.finished_s for t in trajs)
    span = ends[-1] - start
    if span <= 0:
        return 0.0
    # The moment the 0.9 * n-th trajectory finished, interpolated between finishes when 0.9 * n
    # is not whole (else a batch under 10 would always read 0: its 90% point is its last one).
    # 0.9 * n lies in [1.8, n): both neighbours exist.
    whole, part = divmod(0.9 * len(ends), 1.0)
    i = int(whole)
    t90 = ends[i - 1] + part * (ends[i] - ends[i - 1])
    return (ends[-1] - t90) / span


def _share(trajs: list[Trajectory], predicate) -> float | None:
    return sum(bool(predicate(t)) for t in trajs) / len(trajs) if trajs else None


def tamper_rate(trajs: list[Trajectory]) -> float | None:
    """Share of the scored attempts that changed a protected path (reward hacking tried)."""
    return _share([t for t in trajs if not t.is_infra_error], lambda t: bool(t.tampered))


def _rate(trajs: list[Trajectory], outcome: Outcome) -> float | None:
    return _share(trajs, lambda t: t.outcome == outcome.value)


def entropy_estimate(trajs: list[Trajectory]) -> float | None:
    """Mean entropy of the policy over generated tokens, estimated without the full distribution:
    a token drawn from p has E[-log p(token)] = H(p), so the mean negative behaviour log-prob of
    the sampled tokens is an unbiased estimate (at the rollout temperature, before top-p)."""
    total, count = 0.0, 0
    for t in trajs:
        for logprob, generated in zip(t.logprobs, t.loss_mask):
            if generated:
                total -= logprob
                count += 1
    return total / count if count else None


def stale_token_fraction(kept: list[Trajectory], trained_masks: list[list[int]]) -> float | None:
    """Share of the trained trajectories' generated tokens masked out of the loss as stale
    (rollout.staleness_unit=token; 0.0 under `trajectory`). Trajectories dropped whole are not
    in it: they are `stale_dropped_in_batch`."""
    generated = sum(t.num_generated for t in kept)
    return (generated - sum(sum(m) for m in trained_masks)) / generated if generated else None


def batch_stats(kept: list[Trajectory], finished: list[Trajectory], version: int, window_s: float,
                trained_masks: list[list[int]] | None = None) -> dict:
    """kept: the trajectories trained in this batch; finished: all returned since the last batch;
    trained_masks: each kept trajectory's loss mask as trained (None: its own, nothing masked)."""
    masks = [list(t.loss_mask) for t in kept] if trained_masks is None else trained_masks
    if len(masks) != len(kept):
        raise ValueError(f"{len(masks)} trained masks for {len(kept)} trajectories")
    # Staleness of what is trained: the oldest token left in the loss (under staleness_unit=token
    # older ones were masked, and their share is stale_token_fraction).
    staleness = [version - oldest_version(t.versions, m, t.admitted_version) for t, m in zip(kept, masks)]
    by_source: dict[str, int] = {}
    for t in finished:
        if t.is_infra_error:
            by_source[t.infra_source or "unknown"] = by_source.get(t.infra_source or "unknown", 0) + 1
    starts = [t.sandbox_start_s for t in finished if t.sandbox_start_s is not None]
    return {
        "reward_mean": statistics.fmean(t.reward for t in kept) if kept else None,
        "resolved_rate": _rate(finished, Outcome.RESOLVED),
        "truncated_rate": _rate(finished, Outcome.TRUNCATED),
        "format_error_rate": _rate(finished, Outcome.FORMAT_ERROR),
        "infra_error_rate": _rate(finished, Outcome.INFRA_ERROR),
        "infra_error_by_source": by_source,
        "tamper_rate": tamper_rate(finished),
        "staleness_mean": statistics.fmean(staleness) if staleness else None,
        "staleness_max": max(staleness) if staleness else None,
        "staleness_hist": {str(k): staleness.count(k) for k in sorted(set(staleness))},
        "stale_token_fraction": stale_token_fraction(kept, masks),
        "tail_fraction": tail_fraction(kept),
        "turns_mean": statistics.fmean(t.turns for t in kept) if kept else None,
        "tokens_mean": statistics.fmean(t.num_generated for t in kept) if kept else None,
        # Where the step's tokens went (swerve bench profile's floor): every token of the trained
        # sequences, the generated ones among them, and all generated since the last batch,
        # including groups dynamic sampling dropped and trajectories that ended in infra errors.
        "tokens_trained": sum(len(t.token_ids) for t in kept),
        "tokens_generated_trained": sum(t.num_generated for t in kept),
        "tokens_generated_finished": sum(t.num_generated for t in finished),
        # Training samples per trajectory: above 1 when agent harnesses rewrote their history
        # (swerve/Harness-v0 under env.harness.history=split).
        "segments_mean": statistics.fmean(max(1, len(t.segment_starts)) for t in kept) if kept else None,
        "entropy_mean": entropy_estimate([t for t in finished if not t.is_infra_error]),
        "sandbox_start_p50_s": statistics.median(starts) if starts else None,
        "rollout_traj_per_hour": len(finished) * 3600.0 / window_s if window_s > 0 else None,
    }
