import pytest

from actors.training.batch_stats import batch_stats, tail_fraction
from actors.episodes.trajectory import Trajectory


def traj(start, end, outcome="unresolved", reward=0.0, version=0, source=None):
    return Trajectory(0, 0, 0, "t", 0, outcome=outcome, reward=reward, infra_source=source,
                      token_ids=[1, 2], loss_mask=[0, 1], logprobs=[0, -1], versions=[-1, version],
                      started_s=start, finished_s=end, turns=2, sandbox_start_s=0.1)


def test_tail_fraction_is_time_after_90_percent():
    trajs = [traj(0, 1) for _ in range(9)] + [traj(0, 10)]
    # 90% finished at t=1; the last at t=10; span 10 -> tail 0.9
    assert tail_fraction(trajs) == pytest.approx(0.9)


def test_tail_fraction_of_a_small_batch_interpolates_the_90_percent_point():
    trajs = [traj(0, 1) for _ in range(7)] + [traj(0, 11)]
    # 0.9 x 8 = 7.2 finishes: a fifth of the way from the 7th (t=1) to the 8th (t=11), t=3
    assert tail_fraction(trajs) == pytest.approx(8 / 11)


def test_rates_and_staleness():
    kept = [traj(0, 1, "resolved", 1.0, version=1), traj(0, 2, "unresolved", 0.0, version=2)]
    finished = kept + [traj(0, 3, "infra_error", source="sandbox")]
    s = batch_stats(kept, finished, version=2, window_s=3600)
    assert s["reward_mean"] == 0.5 and s["staleness_max"] == 1 and s["staleness_mean"] == 0.5
    assert s["infra_error_rate"] == pytest.approx(1 / 3) and s["infra_error_by_source"] == {"sandbox": 1}
    assert s["rollout_traj_per_hour"] == pytest.approx(3)


def test_stale_token_fraction_counts_masked_generated_tokens_of_the_trained_trajectories():
    a = Trajectory(0, 0, 0, "t", 0, outcome="unresolved", token_ids=[1, 2, 3, 4], loss_mask=[0, 1, 1, 1],
                   logprobs=[0, -1, -1, -1], versions=[-1, 0, 1, 2], started_s=0, finished_s=1)
    b = traj(0, 1, version=2)  # one generated token, at the batch's version
    # Under rollout.staleness_unit=token with a bound of 1 at version 2, a's version-0 token was masked.
    s = batch_stats([a, b], [a, b], version=2, window_s=1, trained_masks=[[0, 0, 1, 1], [0, 1]])
    assert s["stale_token_fraction"] == pytest.approx(1 / 4)
    assert s["staleness_max"] == 1 and s["tokens_generated_trained"] == 4  # staleness of what was trained
    # Under `trajectory` nothing is masked.
    plain = batch_stats([a, b], [a, b], version=2, window_s=1)
    assert plain["stale_token_fraction"] == 0.0 and plain["staleness_max"] == 2
    assert batch_stats([], [], version=2, window_s=1)["stale_token_fraction"] is None
    with pytest.raises(ValueError, match="1 trained masks for 2"):
        batch_stats([a, b], [], version=2, window_s=1, trained_masks=[[0, 1]])
