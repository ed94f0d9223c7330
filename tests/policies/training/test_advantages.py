import pytest

from actors.episodes.trajectory import STOP
from actors.training.sample_collector import SampleCollector
from actors.episodes.trajectory import Trajectory
from configs.schema import RolloutConfig
from policies.training.advantages import STD_EPS, group_advantages


def test_mixed_rewards_minus_the_group_mean():
    # mean 0.25
    assert group_advantages([1.0, 0.0, 0.0, 0.0]) == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_mixed_rewards_normalised_by_the_sample_std():
    # A = [0.75, -0.25, -0.25, -0.25]; std = sqrt((0.5625 + 3 * 0.0625) / 3) = 0.5
    expected = [a / (0.5 + STD_EPS) for a in (0.75, -0.25, -0.25, -0.25)]
    assert group_advantages([1.0, 0.0, 0.0, 0.0], normalize_std=True) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("normalize_std", [False, True])
@pytest.mark.parametrize("reward", [0.0, 1.0, 0.25, 0.5])
def test_identical_rewards_give_zero_advantages(reward, normalize_std):
    assert group_advantages([reward] * 4, normalize_std) == [0.0] * 4


def test_identical_rewards_that_do_not_round_trip_are_zero_up_to_rounding():
    # sum([0.1] * 3) / 3 is not 0.1 in floats; the advantages are ~1e-17, not snapped to 0.
    assert group_advantages([0.1] * 3) == pytest.approx([0.0] * 3, abs=1e-15)
    assert group_advantages([0.1] * 3, normalize_std=True) == pytest.approx([0.0] * 3, abs=1e-9)


def test_fractional_rewards_enter_as_they_are():
    # mean 0.5; nothing is thresholded at 0.5 or binarised
    assert group_advantages([0.25, 0.75, 1.0, 0.0]) == pytest.approx([-0.25, 0.25, 0.5, -0.5])
    # A = [0.5, 0, -0.5]; std = sqrt(0.5 / 2) = 0.5
    assert group_advantages([1.0, 0.5, 0.0], normalize_std=True) == pytest.approx(
        [0.5 / (0.5 + STD_EPS), 0.0, -0.5 / (0.5 + STD_EPS)], rel=1e-12)


@pytest.mark.parametrize("normalize_std", [False, True])
def test_one_member_is_its_own_mean_and_no_members_give_none(normalize_std):
    assert group_advantages([0.7], normalize_std) == [0.0]
    assert group_advantages([], normalize_std) == []


# -- the collector uses it: same numbers as its former private method ------------------------

def _collector(group_size: int, normalize_std: bool) -> SampleCollector:
    cfg = RolloutConfig(groups_per_batch=1, group_size=group_size, max_staleness=1, max_infra_retries=1,
                        normalize_advantage_std=normalize_std)
    tasks = [f"task-{i}" for i in range(3)]
    return SampleCollector(cfg, tasks, tasks, seed=0)


def _finish(item, reward=0.0, outcome="unresolved", token_version=None) -> Trajectory:
    v = item.admitted_version if token_version is None else token_version
    return Trajectory(item.group_id, item.member, item.attempt, item.task_id, item.admitted_version,
                      outcome=outcome, reward=reward, infra_source="sandbox" if outcome == "infra_error" else None,
                      token_ids=[1, 2, 3], loss_mask=[0, 1, 1], logprobs=[0.0, -1.0, -1.0], versions=[-1, v, v],
                      started_s=0.0, finished_s=1.0)


def _group_zero(c: SampleCollector) -> list:
    items = []
    while (item := c.acquire()) not in (None, STOP):
        items.append(item)
    return [item for item in items if item.group_id == 0]


def _advantage_by_member(batch) -> dict[int, float]:
    return {traj.member: sample.advantage for traj, sample in zip(batch.trajectories, batch.samples)}


def test_collector_normalised_fractional_group_and_infra_attempt_left_out():
    c = _collector(group_size=3, normalize_std=True)
    items = _group_zero(c)
    c.submit(_finish(items[0], reward=1.0))
    c.submit(_finish(items[1], outcome="infra_error"))  # re-run; this attempt has no reward
    c.submit(_finish(items[2], reward=0.0))
    retry = c.acquire()
    assert (retry.group_id, retry.member, retry.attempt) == (0, 1, 1)
    c.submit(_finish(retry, reward=0.5))
    scale = 0.5 + STD_EPS
    assert _advantage_by_member(c.next_batch(1.0)) == pytest.approx({0: 0.5 / scale, 1: 0.0, 2: -0.5 / scale},
                                                                    rel=1e-12)


def test_collector_baseline_leaves_stale_members_out():
    c = _collector(group_size=3, normalize_std=False)
    items = _group_zero(c)
    c.set_version(2)
    c.submit(_finish(items[0], reward=1.0, token_version=0))  # 2 versions behind: dropped as stale
    c.submit(_finish(items[1], reward=1.0, token_version=2))
    c.submit(_finish(items[2], reward=0.0, token_version=2))
    batch = c.next_batch(1.0)
    # the mean is over the two trained members (0.5), not all three (2/3)
    assert _advantage_by_member(batch) == pytest.approx({1: 0.5, 2: -0.5})
    assert c.counts["dropped_stale"] == 1
