import pytest

from actors.episodes.trajectory import STOP
from actors.training.sample_collector import AccountingError, SampleCollector
from actors.episodes.trajectory import Trajectory
from configs.schema import RolloutConfig


def make(groups_per_batch=2, group_size=2, max_staleness=1, mode="async", retries=1, ntasks=5, drop_uniform=False,
         unit="trajectory"):
    cfg = RolloutConfig(groups_per_batch=groups_per_batch, group_size=group_size, max_staleness=max_staleness,
                        mode=mode, max_infra_retries=retries, drop_uniform_groups=drop_uniform, staleness_unit=unit)
    tasks = [f"task-{i}" for i in range(ntasks)]
    return SampleCollector(cfg, tasks, tasks, seed=0)


def finish(item, reward=0.0, outcome="unresolved", version=None, infra_source=None):
    v = item.admitted_version if version is None else version
    return Trajectory(item.group_id, item.member, item.attempt, item.task_id, item.admitted_version,
                      outcome=outcome, reward=reward, infra_source=infra_source,
                      token_ids=[1, 2, 3], loss_mask=[0, 1, 1], logprobs=[0.0, -1.0, -1.0], versions=[-1, v, v],
                      started_s=0.0, finished_s=1.0)


def drain(c):
    items = []
    while (item := c.acquire()) not in (None, STOP):
        items.append(item)
    return items


def test_capacity_rule_counts_groups():
    c = make(groups_per_batch=2, group_size=2, max_staleness=1)
    items = drain(c)
    # (max_staleness + version + 1) x groups_per_batch = 4 groups of 2 members
    assert len(items) == 8 and c.groups_admitted == 4
    c.set_version(1)
    assert len(drain(c)) == 4


def test_sync_mode_admits_one_batch_per_version():
    c = make(mode="sync", max_staleness=3)
    assert len(drain(c)) == 4


def test_batch_from_complete_groups_oldest_first_with_group_advantages():
    c = make()
    items = drain(c)
    # Finish the newest groups first; the batch must still take the oldest complete groups.
    for item in reversed(items):
        c.submit(finish(item, reward=float(item.member == 0)))
    batch = c.next_batch(1.0)
    assert sorted({t.group_id for t in batch.trajectories}) == [0, 1]
    for traj, sample in zip(batch.trajectories, batch.samples):
        assert sample.advantage == pytest.approx(traj.reward - 0.5)
    acc = c.accounting()
    assert acc["trained"] == 4 and acc["buffered"] == 4 and acc["identity_holds"]


def test_dynamic_sampling_drops_uniform_groups_and_frees_their_slots():
    c = make(drop_uniform=True)
    items = drain(c)
    assert c.groups_admitted == 4
    for item in items:  # groups 0 and 2 all-zero rewards; groups 1 and 3 mixed
        c.submit(finish(item, reward=float(item.group_id % 2 == 1 and item.member == 0)))
    batch = c.next_batch(1.0)
    assert sorted({t.group_id for t in batch.trajectories}) == [1, 3]
    acc = c.accounting()
    assert acc["filtered_uniform"] == 4 and acc["trained"] == 4 and acc["identity_holds"]
    # The two filtered groups gave back their admission capacity: two new groups start now.
    assert len(drain(c)) == 4 and c.groups_admitted == 6


def test_uniform_groups_kept_without_dynamic_sampling():
    c = make()
    for item in drain(c):
        c.submit(finish(item, reward=1.0))
    batch = c.next_batch(1.0)
    assert len(batch.samples) == 4 and all(s.advantage == 0.0 for s in batch.samples)
    assert c.accounting()["filtered_uniform"] == 0


def test_incomplete_groups_do_not_make_a_batch():
    c = make()
    items = drain(c)
    c.submit(finish(items[0]))
    c.submit(finish(items[2]))
    assert c.next_batch(1.0) is None
    assert c.accounting()["in_flight"] == 6


def test_the_trainer_is_paced_by_work_at_the_staleness_edge_instead_of_dropping_it():
    c = make(max_staleness=1)
    items = drain(c)  # 4 groups of 2, all started at version 0
    for item in items[:4]:
        c.submit(finish(item))  # groups 0 and 1 complete: one batch
    c.set_version(1)  # work started at 0 is kept now, but would be stale after the next batch
    assert c.next_batch(1.0) is None  # so the trainer waits for the in-flight rest
    for item in items[4:7]:
        c.submit(finish(item))
    assert c.next_batch(1.0) is None  # a finished member of an incomplete group still waits for its mate
    c.submit(finish(items[7]))
    first, second = c.next_batch(1.0), c.next_batch(1.0)
    assert len(first.samples) == len(second.samples) == 4 and c.counts["dropped_stale"] == 0
    assert c.accounting()["trained"] == 8


def test_stale_trajectories_dropped_and_counted():
    c = make(max_staleness=1)
    items = drain(c)
    for item in items:
        c.submit(finish(item))
    c.set_version(2)  # tokens from version 0 are now 2 behind
    batch = c.next_batch(1.0)
    assert batch.samples == [] and c.counts["dropped_stale"] == 4
    c.accounting()


def spanning(item, versions, reward=0.0):
    """A trajectory that generated across weight updates: a prompt token, then one token per version."""
    n = len(versions)
    return Trajectory(item.group_id, item.member, item.attempt, item.task_id, item.admitted_version,
                      outcome="unresolved", reward=reward, token_ids=list(range(1, n + 2)), loss_mask=[0] + [1] * n,
                      logprobs=[0.0] + [-1.0] * n, versions=[-1, *versions], started_s=0.0, finished_s=1.0)


def test_token_unit_trains_a_straggler_on_its_fresh_tokens_and_drops_one_with_none():
    c = make(max_staleness=1, unit="token", groups_per_batch=1)
    items = drain(c)  # group 0: members 0 and 1, both admitted at version 0
    c.set_version(3)
    c.submit(spanning(items[0], [0, 1, 2, 3], reward=1.0))  # tokens at 0 and 1 are past the bound
    c.submit(spanning(items[1], [0, 1, 1]))  # every generated token is past it
    batch = c.next_batch(1.0)
    assert [t.member for t in batch.trajectories] == [0]
    (sample,) = batch.samples
    assert sample.loss_mask == [0, 0, 0, 1, 1] and sample.token_ids == [1, 2, 3, 4, 5]  # context kept whole
    assert sample.advantage == 0.0  # the group's baseline is over the members trained
    assert batch.trajectories[0].loss_mask == [0, 1, 1, 1, 1]  # the record keeps what was generated
    assert batch.stats["stale_token_fraction"] == 0.5 and batch.stats["stale_dropped_in_batch"] == 1
    assert batch.stats["staleness_max"] == 1  # of the tokens trained
    acc = c.accounting()
    assert acc["dropped_stale"] == 1 and acc["trained"] == 1 and acc["identity_holds"]


def test_token_unit_leaves_out_a_segment_with_no_trained_token():
    c = make(max_staleness=0, unit="token", groups_per_batch=1)
    items = drain(c)
    c.set_version(1)
    for item in items:
        traj = spanning(item, [0, 0, 1, 1], reward=float(item.member))
        traj.segment_starts = [0, 3]  # the first segment holds only version-0 tokens
        c.submit(traj)
    batch = c.next_batch(1.0)
    assert len(batch.trajectories) == 2 and [s.loss_mask for s in batch.samples] == [[1, 1], [1, 1]]
    assert batch.num_loss_tokens == 4 and batch.stats["stale_token_fraction"] == 0.5


def test_under_token_a_straggler_does_not_hold_back_the_batch_trajectory_waits_for():
    for unit in ("trajectory", "token"):
        c = make(max_staleness=1, unit=unit)
        items = drain(c)  # 4 groups of 2, all started at version 0
        for item in items[:4]:
            c.submit(finish(item))  # groups 0 and 1 complete
        c.set_version(1)  # groups 2 and 3 still in flight, started at the edge
        batch = c.next_batch(1.0)
        if unit == "trajectory":
            assert batch is None  # paced: unchanged
            continue
        assert len(batch.samples) == 4 and batch.stats["stale_token_fraction"] == 0.0
        c.set_version(2)
        for item in items[4:6]:  # a straggler group whose tokens are all from version 0: stale
            c.submit(finish(item))
        for item in items[6:]:  # one that kept generating after the updates: its last token is fresh
            c.submit(spanning(item, [0, 1]))
        second = c.next_batch(1.0)
        assert [s.loss_mask for s in second.samples] == [[0, 0, 1], [0, 0, 1]]
        assert second.stats["stale_token_fraction"] == 0.5 and second.stats["stale_dropped_in_batch"] == 2
        acc = c.accounting()
        assert acc["trained"] == 6 and acc["dropped_stale"] == 2 and acc["identity_holds"]


def test_under_token_a_batch_waits_only_for_finished_work_the_next_version_would_drop_whole():
    c = make(max_staleness=1, unit="token")
    items = drain(c)  # 4 groups of 2, all started at version 0
    for item in items[:4]:
        c.submit(finish(item))  # groups 0 and 1 complete
    c.set_version(1)
    c.submit(spanning(items[4], [0, 1]))  # group 2: its newest token is fresh at the next version too
    c.submit(finish(items[6]))  # group 3: every token at version 0, the edge: version 2 would drop it
    assert c.next_batch(1.0) is None  # paced, although members 5 and 7 are a straggler in flight
    c.submit(spanning(items[7], [0, 1]))  # its sibling finishes: group 3 is complete
    batch = c.next_batch(1.0)  # member 5, in flight since version 0 (the edge), is not waited for
    assert sorted({t.group_id for t in batch.trajectories}) == [0, 1] and batch.stats["stale_dropped_in_batch"] == 0
    acc = c.accounting()
    assert acc["dropped_stale"] == 0 and acc["identity_holds"]


def test_the_next_version_loses_a_trajectory_at_its_oldest_or_its_newest_token():
    from actors.training.staleness import StalenessRule

    c = make(max_staleness=1)
    item = drain(c)[0]
    traj = spanning(item, [0, 2])  # tokens at versions 0 and 2
    by_trajectory, by_token = StalenessRule("trajectory", 1), StalenessRule("token", 1)
    assert [by_trajectory.lost_by_next_version(traj, v) for v in range(4)] == [False, True, False, False]
    assert [by_token.lost_by_next_version(traj, v) for v in range(5)] == [False, False, False, True, False]


def test_stale_drops_under_both_units_keep_the_identity():
    for unit in ("trajectory", "token"):
        c = make(max_staleness=1, unit=unit)
        items = drain(c)
        for item in items:
            c.submit(finish(item))
        c.set_version(2)  # every token is from version 0: two behind
        batch = c.next_batch(1.0)
        assert batch.samples == [] and batch.stats["stale_dropped_in_batch"] == 4
        acc = c.accounting()
        assert acc["dropped_stale"] == 4 and acc["buffered"] == 4 and acc["identity_holds"]


def test_infra_error_reruns_only_that_member_and_is_never_trained():
    c = make(retries=1)
    items = drain(c)[:2]  # group 0
    c.submit(finish(items[0], reward=1.0, outcome="resolved"))
    c.submit(finish(items[1], outcome="infra_error", infra_source="sandbox"))
    retry = c.acquire()
    assert (retry.group_id, retry.member, retry.attempt) == (0, 1, 1)
    c.submit(finish(retry, reward=0.0))
    acc = c.accounting()
    assert acc["infra_excluded"] == 1 and acc["admitted"] == 9


def test_task_quarantined_after_repeated_infra_errors():
    c = make(retries=0)
    items = drain(c)
    c.submit(finish(items[0], reward=1.0))
    c.submit(finish(items[1], outcome="infra_error", infra_source="grader"))
    acc = c.accounting()
    assert items[0].task_id in acc["quarantined_tasks"]
    assert acc["quarantined"] == 1 and acc["infra_excluded"] == 1


def test_an_engines_failures_never_quarantine_the_task():
    # A dead or silent engine fails every member that meets it: none of that is the task's doing.
    c = make(retries=0)
    items = drain(c)
    c.submit(finish(items[0], outcome="infra_error", infra_source="engine"))
    rerun = c.acquire()
    assert (rerun.task_id, rerun.member, rerun.attempt) == (items[0].task_id, items[0].member, 1)
    c.submit(finish(rerun, outcome="infra_error", infra_source="engine"))
    acc = c.accounting()
    assert acc["quarantined_tasks"] == {} and acc["infra_excluded"] == 2 and acc["quarantined"] == 0


def test_a_dead_group_gives_its_admission_capacity_back():
    c = make(retries=0, groups_per_batch=1, max_staleness=0)  # capacity: one group
    items = drain(c)
    assert len(items) == 2 and c.acquire() is None
    c.submit(finish(items[0], outcome="infra_error", infra_source="sandbox"))  # its task is quarantined
    fresh = drain(c)  # before the fix: capacity stayed spent and no batch could ever come
    assert len(fresh) == 2 and {item.task_id for item in fresh} != {items[0].task_id}


def test_stop_returns_stop():
    c = make()
    c.stop()
    assert c.acquire() == STOP


def test_identity_violation_is_loud():
    c = make()
    drain(c)
    c.counts["trained"] += 1
    with pytest.raises(AccountingError, match="identity"):
        c.accounting()


def test_empty_task_set_names_the_fix():
    with pytest.raises(ValueError, match="tasks.split"):
        SampleCollector(RolloutConfig(), [], [], seed=0)


def test_all_tasks_quarantined_is_reported():
    c = make(retries=0, ntasks=1, group_size=1)
    item = c.acquire()
    c.submit(finish(item, outcome="infra_error", infra_source="sandbox"))
    assert c.acquire() is None
    assert "every task is quarantined" in c.accounting()["tasks_exhausted"]


class EndedStream:
    """A stream that made `count` tasks and ended (a repository's bugs ran out)."""

    def __init__(self, inner, count):
        self.inner, self.count, self.source = inner, count, "a small repository"

    def task(self, index):
        if index >= self.count:
            raise IndexError(index)
        return self.inner.task(index)

    def index_of(self, task_id):
        return self.inner.index_of(task_id)

    def available(self):
        return self.count

    def finished(self):
        return True

    def close(self):
        self.inner.close()


@pytest.mark.slow
def test_a_stream_that_ran_dry_is_exhausted_only_once_its_last_work_finished(tmp_path, monkeypatch):
    from envs.tasks.micro_stream import MicroStream

    monkeypatch.setenv("SWERVE_CACHE_DIR", str(tmp_path / "cache"))
    cfg = RolloutConfig(groups_per_batch=3, group_size=2, max_staleness=1, task_selection="pass_rate")
    c = SampleCollector(cfg, EndedStream(MicroStream(seed=0), 2), [], seed=0)
    items = drain(c)
    assert len(items) == 4  # both tasks, one group each: the stream ran dry
    assert c.accounting()["tasks_exhausted"] is None  # their work may still make a batch
    for item in items[:-1]:
        c.submit(finish(item, reward=float(item.member)))
    assert c.accounting()["tasks_exhausted"] is None
    c.submit(finish(items[-1]))
    assert c.next_batch(1.0) is None  # 2 groups, 3 wanted: no batch can ever come
    why = c.accounting()["tasks_exhausted"]
    assert "a small repository ended" in why and "4 trajectories buffered" in why


def test_snapshot_restore_readmits_in_flight_and_trains_nothing_twice():
    import pickle

    c = make()
    items = drain(c)
    for item in items[:4]:
        c.submit(finish(item, reward=float(item.member)))
    first = c.next_batch(1.0)
    c.set_version(1)
    c.submit(finish(items[4]))  # buffered, its group incomplete
    state = pickle.loads(pickle.dumps(c.snapshot()))  # what a checkpoint stores

    tasks = [f"task-{i}" for i in range(5)]
    resumed = SampleCollector(c.cfg, tasks, tasks, seed=99)
    assert resumed.restore(state) == 3  # items 5, 6, 7 were in flight
    acc = resumed.accounting()
    assert acc["trained"] == 4 and acc["buffered"] == 1 and acc["in_flight"] == 0
    again = drain(resumed)
    assert [(w.group_id, w.member) for w in again[:3]] == [(i.group_id, i.member) for i in items[5:8]]
    for item in again:
        resumed.submit(finish(item, version=1))
    batch = resumed.next_batch(1.0)
    trained = {(t.group_id, t.member) for t in first.trajectories} | {(t.group_id, t.member) for t in batch.trajectories}
    assert len(trained) == len(first.trajectories) + len(batch.trajectories)
    assert resumed.accounting()["identity_holds"]


def test_result_from_before_a_restart_is_refused():
    c = make()
    item = c.acquire()
    c.submit(finish(item))
    with pytest.raises(AccountingError, match="not in flight"):
        c.submit(finish(item))
