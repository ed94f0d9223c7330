import random
from collections import Counter

import pytest

from actors.episodes.trajectory import STOP
from actors.training.sample_collector import SampleCollector
from actors.training.task_picker import PassRatePicker, UniformPicker, informative_probability, make_picker
from actors.training.task_table import TaskTable
from actors.episodes.trajectory import Trajectory
from configs.schema import RolloutConfig


def picker(num_tasks=4, explore_fraction=0.0, half_life=4.0, seed=0):
    return PassRatePicker(table(num_tasks), random.Random(seed), group_size=8, half_life_versions=half_life,
                          explore_fraction=explore_fraction)


def table(num_tasks):
    return TaskTable([f"task-{i}" for i in range(num_tasks)], [f"task-{i}" for i in range(num_tasks)])


def test_informative_probability_peaks_at_one_half():
    assert informative_probability(0.5, 8) == pytest.approx(1 - 2 * 0.5 ** 8)
    assert informative_probability(0.0, 8) == 0.0 and informative_probability(1.0, 8) == 0.0
    assert informative_probability(0.5, 8) > informative_probability(0.3, 8) > informative_probability(0.05, 8)


def test_a_task_near_one_half_is_preferred_over_ones_at_zero_and_one():
    p = picker(num_tasks=3)
    p.observe(0, [0.0] * 8, version=0)        # never solved
    p.observe(1, [1.0] * 8, version=0)        # always solved
    p.observe(2, [1.0] * 4 + [0.0] * 4, version=0)
    picks = [p.pick(version=v, excluded=(), busy=()) for v in range(1, 6)]
    assert picks == [2] * 5
    assert p.stats()["groups_by_pass_rate"] == 5 and p.stats()["groups_explored"] == 0


def test_unseen_tasks_are_explored_when_the_seen_ones_carry_no_gradient():
    p = picker(num_tasks=5)
    p.observe(0, [0.0] * 8, version=0)
    p.observe(1, [1.0] * 8, version=0)
    picks = {p.pick(version=1, excluded=(), busy=()) for _ in range(3)}
    assert picks <= {2, 3, 4} and len(picks) == 3  # each admission takes a new task
    assert p.stats()["groups_explored"] == 3


def test_explore_fraction_keeps_exploring_even_when_a_good_task_is_known():
    p = picker(num_tasks=50, explore_fraction=0.5, seed=1)
    p.observe(0, [1.0] * 4 + [0.0] * 4, version=0)
    picks = [p.pick(version=v, excluded=(), busy=()) for v in range(1, 41)]
    explored = sum(i != 0 for i in picks)
    assert 10 <= explored <= 30 and picks.count(0) >= 10


def test_a_task_is_not_admitted_twice_at_one_version_while_others_remain():
    p = picker(num_tasks=3)
    for task in range(3):
        p.observe(task, [1.0] * 4 + [0.0] * 4, version=0)
    picks = [p.pick(version=1, excluded=(), busy=()) for _ in range(3)]
    assert sorted(picks) == [0, 1, 2]


def test_busy_and_quarantined_tasks_are_skipped():
    p = picker(num_tasks=3)
    assert p.pick(version=0, excluded={0}, busy={1}) == 2
    assert p.pick(version=0, excluded={0, 2}, busy={1}) == 1  # only a busy one left
    assert p.pick(version=0, excluded={0, 1, 2}, busy=()) is None


def test_evidence_decays_with_the_half_life():
    p = picker(num_tasks=1, half_life=2.0)
    p.observe(0, [0.0] * 8, version=0)
    assert p.estimate(0, version=0) == pytest.approx(0.1 / 8.2)
    # Two versions later the 8 attempts weigh 4: the estimate moves back toward 1/2.
    assert p.estimate(0, version=2) == pytest.approx(0.1 / 4.2)


def test_snapshot_restores_the_estimates():
    p = picker(num_tasks=4)
    p.observe(0, [1.0, 0.0] * 4, version=1)
    p.observe(1, [0.0] * 8, version=2)
    q = picker(num_tasks=4)
    q.restore(p.snapshot())
    assert q.estimate(0, 3) == p.estimate(0, 3) and q.estimate(1, 3) == p.estimate(1, 3)
    assert q.stats() == p.stats() and q.estimate(2, 3) is None


def test_uniform_picker_visits_every_task_once_per_pass():
    u = make_picker("uniform", table(5), random.Random(0), 8, 4.0, 0.1)
    assert isinstance(u, UniformPicker)
    assert sorted(u.pick(0, ()) for _ in range(5)) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="uniform, pass_rate"):
        make_picker("greedy", table(5), random.Random(0), 8, 4.0, 0.1)


# -- in the collector ---------------------------------------------------------------------------
def collector(ntasks=6):
    cfg = RolloutConfig(groups_per_batch=1, group_size=4, max_staleness=0, task_selection="pass_rate",
                        explore_fraction=0.0, drop_uniform_groups=True)
    tasks = [f"task-{i}" for i in range(ntasks)]
    return SampleCollector(cfg, tasks, tasks, seed=0)


def run_group(c, solve_rate_of):
    """Acquire one group's members and finish them with rewards from the task's solve rate."""
    items = []
    while len(items) < 4 and (item := c.acquire()) not in (None, STOP):
        items.append(item)
    for item in items:
        solved = item.member < round(4 * solve_rate_of[item.task_id])
        c.submit(Trajectory(item.group_id, item.member, item.attempt, item.task_id, item.admitted_version,
                            outcome="resolved" if solved else "unresolved", reward=float(solved),
                            token_ids=[1, 2], loss_mask=[0, 1], logprobs=[0.0, -0.5],
                            versions=[-1, item.admitted_version]))
    return items[0].task_id


def test_collector_admits_by_pass_rate_and_the_identity_holds_across_a_restart():
    rates = {"task-0": 0.0, "task-1": 1.0, "task-2": 0.5, "task-3": 0.0, "task-4": 1.0, "task-5": 1.0}
    c = collector()
    seen = []
    while "task-2" not in seen:  # explores new tasks until one has mixed rewards
        seen.append(run_group(c, rates))
        if c.next_batch(1.0) is not None:
            c.set_version(c.version + 1)
    assert len(set(seen)) == len(seen)  # no uniform task was admitted twice
    # From now on the task with mixed rewards is admitted, one group per version.
    later = []
    for _ in range(3):
        later.append(run_group(c, rates))
        assert c.next_batch(1.0) is not None
        c.set_version(c.version + 1)
    assert later == ["task-2"] * 3
    acc = c.accounting()
    assert acc["identity_holds"] and acc["trained"] == 4 * 4
    assert acc["filtered_uniform"] == 4 * (len(seen) - 1)
    assert acc["admission"]["groups_explored"] == len(seen) and acc["admission"]["groups_by_pass_rate"] == 3

    restored = collector()
    restored.restore(c.snapshot())
    assert restored.picker.estimate(2, restored.version) == c.picker.estimate(2, c.version)
    assert restored.accounting()["admission"] == acc["admission"]
    assert run_group(restored, rates) == "task-2"
    assert restored.accounting()["identity_holds"]


def test_collector_reports_learning_stats_per_batch():
    c = collector()
    run_group(c, {f"task-{i}": 0.5 for i in range(6)})
    batch = c.next_batch(1.0)
    assert batch.stats["informative_group_fraction"] == 1.0 and batch.stats["groups_finished"] == 1
    assert batch.stats["advantage_std"] == pytest.approx(0.5)
    assert batch.stats["train_pass_rate"] == pytest.approx(0.5)
    assert batch.stats["entropy_mean"] == pytest.approx(0.5)
    assert [s.versions for s in batch.samples] == [[-1, 0]] * 4


# -- on an endless stream of fresh tasks ---------------------------------------------------------
# The policy's pass rate per family on new tasks: compare is solved, constant never, operator half.
FAMILY_RATE = {"compare": 1.0, "constant": 0.0, "off_by_one": 0.0, "variable": 1.0, "operator": 0.5}


@pytest.fixture
def stream(tmp_path, monkeypatch):
    from envs.tasks.micro_stream import MicroStream

    monkeypatch.setenv("SWERVE_CACHE_DIR", str(tmp_path / "cache"))
    return MicroStream(seed=0)


def stream_collector(stream, explore_fraction=0.1):
    cfg = RolloutConfig(groups_per_batch=1, group_size=4, max_staleness=0, task_selection="pass_rate",
                        explore_fraction=explore_fraction, drop_uniform_groups=True)
    return SampleCollector(cfg, stream, [], seed=0)


def run_stream_group(c, rng, family_rate=FAMILY_RATE):
    items = []
    while len(items) < 4 and (item := c.acquire()) not in (None, STOP):
        items.append(item)
    rate = family_rate[items[0].task.family]
    for item in items:
        solved = rng.random() < rate
        c.submit(Trajectory(item.group_id, item.member, item.attempt, item.task_id, item.admitted_version,
                            outcome="resolved" if solved else "unresolved", reward=float(solved),
                            token_ids=[1, 2], loss_mask=[0, 1], logprobs=[0.0, -0.5],
                            versions=[-1, item.admitted_version]))
    if c.next_batch(1.0) is not None:
        c.set_version(c.version + 1)
    return items[0].task


@pytest.mark.slow
def test_on_a_stream_every_group_is_a_new_task_and_the_family_near_one_half_is_preferred(stream):
    c, rng = stream_collector(stream), random.Random(1)
    tasks = [run_stream_group(c, rng) for _ in range(120)]
    assert len({t.id for t in tasks}) == len(tasks)  # each task rolled out as one group, never again
    later = Counter(t.family for t in tasks[40:])
    assert later["operator"] > 2 * max(later[f] for f in FAMILY_RATE if f != "operator"), later
    assert all(later[f] > 0 for f in FAMILY_RATE), later  # exploration keeps every family measured
    acc = c.accounting()
    assert acc["identity_holds"] and acc["admitted"] == 4 * 120 and not acc["tasks_exhausted"]
    admission = acc["admission"]
    assert admission["groups_explored"] == 120 and admission["groups_by_pass_rate"] == 0
    assert admission["stream_passed_over"] > 0 and admission["tasks_seen"] == 120
    assert admission["kinds"]["operator/easy"]["value"] > admission["kinds"]["compare/easy"]["value"]


@pytest.mark.slow
def test_groups_admitted_at_random_measure_the_streams_own_mix_which_the_curriculum_does_not(stream):
    # Every family but operator is always solved: the stream's mix passes 90%, but the picker
    # spends its groups on operator (the only one with a gradient), so train_pass_rate is lower.
    rates = {**{f: 1.0 for f in FAMILY_RATE}, "operator": 0.5}
    c, rng = stream_collector(stream, explore_fraction=0.3), random.Random(3)
    stats = []
    for _ in range(150):
        run_stream_group(c, rng, rates)
        stats.append(c.last_batch_stats)
    at_random, running = stats[-1]["pass_rate_at_random"], stats[-1]["train_pass_rate"]
    assert at_random >= 0.8 and running <= at_random - 0.15, (at_random, running)
    restored = stream_collector(stream, explore_fraction=0.3)
    restored.restore(c.snapshot())
    assert restored.snapshot()["random_rewards"] == c.snapshot()["random_rewards"]
    # Uniform admission ignores estimates: every group counts as at random.
    u = SampleCollector(RolloutConfig(groups_per_batch=1, group_size=4, max_staleness=0), stream, [], seed=0)
    for _ in range(5):
        run_stream_group(u, rng, rates)
    assert u.last_batch_stats["pass_rate_at_random"] == u.last_batch_stats["train_pass_rate"]


@pytest.mark.slow
def test_a_restarted_stream_collector_keeps_its_estimates_and_draws_no_task_twice(stream):
    c, rng = stream_collector(stream), random.Random(2)
    before = [run_stream_group(c, rng).id for _ in range(30)]
    restored = stream_collector(stream)
    restored.restore(c.snapshot())
    for kind in ("operator/easy", "constant/easy", "compare/hard"):
        assert restored.picker.kind_value(kind, restored.version) == c.picker.kind_value(kind, c.version)
    assert restored.accounting()["admission"] == c.accounting()["admission"]
    after = [run_stream_group(restored, rng).id for _ in range(10)]
    assert not set(after) & set(before) and restored.accounting()["identity_holds"]


@pytest.mark.slow
def test_without_evidence_the_stream_is_taken_in_order_and_uniform_walks_it(stream):
    p = PassRatePicker(TaskTable(stream), random.Random(0), group_size=8, half_life_versions=4.0, explore_fraction=0.0)
    assert [p.pick(version=0, excluded=()) for _ in range(5)] == [0, 1, 2, 3, 4]  # every kind worth 1/2
    u = make_picker("uniform", TaskTable(stream), random.Random(0), 8, 4.0, 0.1)
    assert [u.pick(0, excluded={1}) for _ in range(3)] == [0, 2, 3]


@pytest.mark.slow
def test_unseen_tasks_of_a_list_are_drawn_by_their_kind(tmp_path, monkeypatch):
    monkeypatch.setenv("SWERVE_CACHE_DIR", str(tmp_path / "cache"))
    from envs.tasks.loaders import load_tasks

    tasks = load_tasks("micro", "train")[:50]
    p = PassRatePicker(TaskTable(tasks), random.Random(0), group_size=4, half_life_versions=4.0, explore_fraction=0.0)
    for i, task in enumerate(tasks[:10]):  # one group of each kind's first tasks
        p.observe(i, [1.0, 0.0] if task.family == "operator" else [0.0, 0.0], version=0)
    picks = [tasks[p.pick(version=1, excluded=())].family for _ in range(20)]
    assert Counter(picks)["operator"] >= 8, picks


def test_the_books_say_which_kinds_finished_gave_a_gradient_and_were_trained(stream):
    c, rng = stream_collector(stream), random.Random(1)
    tasks = [run_stream_group(c, rng) for _ in range(15)]
    by_kind = c.accounting()["groups_by_kind"]
    kinds = Counter(f"{t.family}/{t.stratum}" for t in tasks)
    assert {kind: counts["finished"] for kind, counts in by_kind.items()} == dict(kinds)
    for kind, counts in by_kind.items():
        # Only operator (solved half the time) can give a mixed group, and only mixed groups train.
        assert counts["trained"] == counts["informative"] <= counts["finished"]
        if not kind.startswith("operator/"):
            assert counts["informative"] == 0
    assert sum(counts["trained"] for counts in by_kind.values()) == c.accounting()["trained"] // 4 > 0
    restored = stream_collector(stream)
    restored.restore(c.snapshot())
    assert restored.accounting()["groups_by_kind"] == by_kind
