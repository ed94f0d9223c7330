"""The only owner of "what is trainable": admission, groups, advantages, batches, accounting.

Counts are in trajectories (one dispatched attempt of one group member); admission is
counted in groups (AReaL's capacity rule). Every path keeps the identity

    admitted = in_flight + buffered + trained + dropped_stale + infra_excluded + quarantined
               + filtered_uniform

`filtered_uniform` counts members of groups dropped by dynamic sampling
(`rollout.drop_uniform_groups`): every member got the same reward, so the group's advantages are
all zero and it would only dilute the batch; it frees its admission slot for a new group.

Staleness (`rollout.max_staleness`, counted in `rollout.staleness_unit`): actors/training/staleness.py.
"""
from __future__ import annotations

import random
import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from typing import Optional, Sequence, Union

from actors.training.batch_stats import batch_stats
from actors.training.staleness import StalenessRule
from actors.training.task_picker import make_picker
from actors.training.task_table import TaskTable, kind_of
from actors.episodes.trajectory import STOP, Batch, TrainSample, Trajectory, WorkItem, WorkSource
from configs.schema import RolloutConfig
from envs.outcomes import InfraSource, Outcome
from envs.tasks.stream import TaskStream
from policies.training.advantages import group_advantages

COUNTERS = ("admitted", "in_flight", "buffered", "trained", "dropped_stale", "infra_excluded", "quarantined",
            "filtered_uniform")


def _mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


class AccountingError(RuntimeError):
    """The books do not balance, or a trajectory would be counted or trained twice: the run stops."""


@dataclass
class _Group:
    group_id: int
    task: object
    task_id: str
    admitted_version: int
    size: int
    members: dict = field(default_factory=dict)  # member index -> Trajectory
    dead: bool = False  # its task was quarantined

    @property
    def complete(self) -> bool:
        return not self.dead and len(self.members) == self.size


class SampleCollector(WorkSource):
    def __init__(self, cfg: RolloutConfig, tasks: Union[Sequence, TaskStream], task_ids: Sequence[str], seed: int):
        """`tasks`: a list (with its ids) or an endless stream (envs/tasks/stream.py; `task_ids` empty)."""
        self.cfg = cfg
        self.staleness = StalenessRule(cfg.staleness_unit, cfg.max_staleness)
        self.table = TaskTable(tasks, task_ids)
        self._rng = random.Random(seed)
        self.picker = make_picker(cfg.task_selection, self.table, self._rng, cfg.group_size,
                                  cfg.pass_rate_half_life_versions, cfg.explore_fraction)
        self.version = 0
        self.counts = {name: 0 for name in COUNTERS}
        self.groups_admitted = 0
        self.groups_filtered = 0
        self.quarantined_tasks: dict[str, str] = {}
        self._groups: dict[int, _Group] = {}
        self._pending: deque[WorkItem] = deque()
        self._in_flight: dict[tuple[int, int, int], WorkItem] = {}
        # Who runs each in-flight item (see abandon) and the version it started at (see pacing).
        self._handed_out: dict[tuple[int, int, int], tuple[str, int]] = {}
        self._trained_keys: set[tuple[int, int, int]] = set()
        self._finished_since_batch: list[Trajectory] = []
        self._stopped = False
        self._last_batch_s = time.monotonic()
        self.readmitted = 0
        self.last_batch_stats: dict = {}
        # Groups that finished since the last batch, and how many of them had mixed rewards.
        self._groups_finished = 0
        self._groups_informative = 0
        # Rewards of the most recent scored trajectories: the policy's running train pass rate.
        self._recent_rewards: deque[float] = deque(maxlen=cfg.pass_rate_window)
        # The same for groups admitted at random (task_picker.admitted_at_random): the curriculum
        # prefers tasks near a 1/2 pass rate, so only these measure the policy on the task mix.
        self._random_rewards: deque[float] = deque(maxlen=cfg.pass_rate_window)
        # kind (family/stratum) -> groups finished, informative (mixed rewards), trained: which kinds
        # RL learned from (issue 39: the families nothing trained were the ones that fell).
        self.groups_by_kind: dict[str, dict[str, int]] = {}

    # -- admission ---------------------------------------------------------------------
    def _capacity_groups(self) -> int:
        staleness = 0 if self.cfg.mode == "sync" else self.cfg.max_staleness
        return (staleness + self.version + 1) * self.cfg.groups_per_batch

    def _groups_counted(self) -> int:
        """Groups that hold admission capacity: filtered ones gave theirs back, and so did dead ones
        (their task was quarantined: they will never fill a batch, and holding their capacity would
        stall admission for good once enough tasks are quarantined)."""
        dead = sum(group.dead for group in self._groups.values())
        return self.groups_admitted - self.groups_filtered - dead

    def _next_task_index(self) -> Optional[int]:
        quarantined = {self.table.index_of(t) for t in self.quarantined_tasks if self.table.has(t)}
        busy = {self.table.index_of(g.task_id) for g in self._groups.values() if not g.dead and not g.complete}
        return self.picker.pick(self.version, quarantined, busy)

    def _admit_group(self) -> bool:
        index = self._next_task_index()
        if index is None:
            return False
        group = _Group(self.groups_admitted, self.table.task(index), self.table.task_id(index), self.version,
                       self.cfg.group_size)
        self._groups[group.group_id] = group
        self.groups_admitted += 1
        for member in range(group.size):
            seed = self._rng.randrange(2**31)
            self._pending.append(WorkItem(group.task, group.task_id, group.group_id, member, 0, self.version, seed))
        return True

    def acquire(self, worker: str = "") -> Optional[WorkItem] | str:
        """Next work item, None when the staleness budget is spent, STOP when the run ends."""
        if self._stopped:
            return STOP
        if not self._pending and self._groups_counted() < self._capacity_groups():
            self._admit_group()
        if not self._pending:
            return None
        item = self._pending.popleft()
        self.counts["admitted"] += 1
        self.counts["in_flight"] += 1
        self._in_flight[(item.group_id, item.member, item.attempt)] = item
        self._handed_out[(item.group_id, item.member, item.attempt)] = (worker, self.version)
        return item

    def abandon(self, worker: str, source: str, reason: str) -> int:
        """The worker died (its process or node): its in-flight work ends as infra_error(source) and
        is re-run like any infra error. Returns how many items it held."""
        keys = [k for k, (w, _) in self._handed_out.items() if w == worker]  # always in flight
        for key in keys:
            item = self._in_flight[key]
            self.submit(Trajectory(item.group_id, item.member, item.attempt, item.task_id, item.admitted_version,
                                   outcome=Outcome.INFRA_ERROR.value, infra_source=source, error=reason[:2000]))
        return len(keys)

    # -- results ----------------------------------------------------------------------
    def submit(self, traj: Trajectory) -> None:
        key = (traj.group_id, traj.member, traj.attempt)
        self._handed_out.pop(key, None)
        if self._in_flight.pop(key, None) is None:
            # A result from before a restart (re-admitted since) or a duplicate: never counted twice.
            raise AccountingError(f"trajectory {key} was not in flight")
        self.counts["in_flight"] -= 1
        self._finished_since_batch.append(traj)
        group = self._groups.get(traj.group_id)
        if group is None:
            raise AccountingError(f"trajectory for unknown group {traj.group_id}")
        if traj.is_infra_error:
            self.counts["infra_excluded"] += 1
            if group.dead:
                return
            # An engine's failure is never its task's: re-run without counting towards quarantine
            # (an engine outage would otherwise quarantine the whole pool in seconds; a run whose
            # engines stay dead is found by the engine set, and by the watchdog: infra errors are
            # no progress).
            if traj.attempt < self.cfg.max_infra_retries or traj.infra_source == InfraSource.ENGINE.value:
                # Re-run only this member; the rest of the group waits in the buffer.
                retry = WorkItem(group.task, group.task_id, group.group_id, traj.member, traj.attempt + 1,
                                 self.version, self._rng.randrange(2**31))
                self._pending.appendleft(retry)
            else:
                self._quarantine(group, f"{traj.attempt + 1} infra errors, last: {traj.infra_source}: {traj.error}")
            return
        if group.dead:
            self.counts["quarantined"] += 1
            return
        group.members[traj.member] = traj
        self.counts["buffered"] += 1
        self._recent_rewards.append(traj.reward)
        if group.complete:
            rewards = [t.reward for t in group.members.values()]
            self._groups_finished += 1
            informative = len(set(rewards)) > 1
            self._groups_informative += int(informative)
            self._tally(group.task, "finished")
            if informative:
                self._tally(group.task, "informative")
            index = self.table.index_of(group.task_id)
            if self.picker.admitted_at_random(index):
                self._random_rewards.extend(rewards)
            self.picker.observe(index, rewards, self.version)

    def _tally(self, task, field: str) -> None:
        counts = self.groups_by_kind.setdefault(kind_of(task) or "(no kind)",
                                                {"finished": 0, "informative": 0, "trained": 0})
        counts[field] += 1

    def _quarantine(self, group: _Group, reason: str) -> None:
        self.quarantined_tasks[group.task_id] = reason
        for dead in [g for g in self._groups.values() if g.task_id == group.task_id]:
            dead.dead = True
            self.counts["buffered"] -= len(dead.members)
            self.counts["quarantined"] += len(dead.members)
            dead.members.clear()
        self._pending = deque(w for w in self._pending if w.task_id != group.task_id)

    # -- batches ----------------------------------------------------------------------
    def _filter_uniform(self) -> None:
        """Dynamic sampling: drop complete groups whose members all got the same reward."""
        for group in [g for g in self._groups.values() if g.complete]:
            if len({traj.reward for traj in group.members.values()}) > 1:
                continue
            del self._groups[group.group_id]
            self.counts["buffered"] -= len(group.members)
            self.counts["filtered_uniform"] += len(group.members)
            self.groups_filtered += 1

    def _straggler_at_bound(self) -> bool:
        """Pacing, not discarding: a batch moves the version on, after which work the staleness
        rule could still train may be dropped whole (wasting its rollout and biasing training
        towards short episodes). Such work holds the next batch back instead: finished members of
        a group that still waits for a member, and, under rollout.staleness_unit=trajectory, work
        in flight that started at version - max_staleness (under `token` it keeps its newer tokens,
        so nothing waits for it). Older work is stale already: waiting would not save it."""
        edge = self.version - self.cfg.max_staleness
        if self.staleness.waits_for_work_in_flight and any(started == edge for _, started in self._handed_out.values()):
            return True
        return any(self.staleness.lost_by_next_version(t, self.version) for g in self._groups.values()
                   if not g.dead and not g.complete for t in g.members.values())

    def next_batch(self, temperature: float) -> Optional[Batch]:
        if self.cfg.drop_uniform_groups:
            self._filter_uniform()
        if self._straggler_at_bound():
            return None
        ready = [g for g in self._groups.values() if g.complete]
        if len(ready) < self.cfg.groups_per_batch:
            return None
        ready.sort(key=lambda g: g.group_id)
        samples, kept, stale, trained_masks, kept_advantages = [], [], [], [], []
        for group in ready[: self.cfg.groups_per_batch]:
            del self._groups[group.group_id]
            self._tally(group.task, "trained")
            fresh = []
            for traj in group.members.values():
                (stale if self.staleness.is_stale(traj, self.version) else fresh).append(traj)
            self.counts["buffered"] -= len(group.members)
            self.counts["dropped_stale"] += len(group.members) - len(fresh)
            self.counts["trained"] += len(fresh)
            # The group's baseline is over the members it trains: stale ones are left out.
            advantages = group_advantages([t.reward for t in fresh], self.cfg.normalize_advantage_std)
            for traj, advantage in zip(fresh, advantages):
                key = (traj.group_id, traj.member, traj.attempt)
                if key in self._trained_keys:
                    raise AccountingError(f"trajectory {key} would be trained twice")
                self._trained_keys.add(key)
                samples.extend(self.staleness.samples(traj, advantage, self.version))
                kept.append(traj)
                kept_advantages.append(advantage)
                trained_masks.append(self.staleness.trained_mask(traj, self.version))
        finished, self._finished_since_batch = self._finished_since_batch, []
        now = time.monotonic()
        stats = batch_stats(kept, finished, self.version, now - self._last_batch_s, trained_masks)
        self._last_batch_s = now
        self.last_batch_stats = stats
        stats["stale_dropped_in_batch"] = len(stale)
        stats.update(self._learning_stats(samples))
        return Batch(self.version, samples, kept, temperature, stats, kept_advantages, trained_masks)

    def _learning_stats(self, samples: list[TrainSample]) -> dict:
        """What tells a user whether RL is learning (see README, "Is it learning?")."""
        advantages = [s.advantage for s in samples]
        mean = sum(advantages) / len(advantages) if advantages else 0.0
        finished, informative = self._groups_finished, self._groups_informative
        self._groups_finished = self._groups_informative = 0
        return {
            "advantage_std": (sum((a - mean) ** 2 for a in advantages) / len(advantages)) ** 0.5 if advantages else None,
            "informative_group_fraction": informative / finished if finished else None,
            "groups_finished": finished,
            "train_pass_rate": _mean(self._recent_rewards),
            "pass_rate_at_random": _mean(self._random_rewards),
        }

    # -- restarts ---------------------------------------------------------------------
    def snapshot(self) -> dict:
        """Everything needed to continue after a restart; tasks are stored by id."""
        def item(w: WorkItem) -> dict:
            return {**asdict(replace(w, task=None)), "task": None}

        return {
            "version": self.version, "counts": dict(self.counts), "groups_admitted": self.groups_admitted,
            "groups_filtered": self.groups_filtered,
            "quarantined_tasks": dict(self.quarantined_tasks), "rng": self._rng.getstate(),
            "picker": self.picker.snapshot(), "readmitted": self.readmitted,
            "recent_rewards": list(self._recent_rewards), "random_rewards": list(self._random_rewards),
            "groups_by_kind": {kind: dict(c) for kind, c in self.groups_by_kind.items()},
            "groups": [{"group_id": g.group_id, "task_id": g.task_id, "admitted_version": g.admitted_version,
                        "size": g.size, "dead": g.dead, "members": dict(g.members)} for g in self._groups.values()],
            "pending": [item(w) for w in self._pending],
            "in_flight": [item(w) for w in self._in_flight.values()],
            "trained_keys": sorted(self._trained_keys),
        }

    def restore(self, state: dict) -> int:
        """Continue from a snapshot; work that was in flight is admitted again. Returns how much."""
        referred = {g["task_id"] for g in state["groups"]} | {w["task_id"] for w in state["in_flight"] + state["pending"]}
        missing = sorted(task_id for task_id in referred if not self.table.has(task_id))
        if missing:
            raise ValueError(f"the checkpoint refers to tasks not in this task set: {missing[:5]}")
        by_id = {task_id: self.table.task(self.table.index_of(task_id)) for task_id in referred}
        self.version, self.groups_admitted = state["version"], state["groups_admitted"]
        self.groups_filtered = state["groups_filtered"]
        self.counts = dict(state["counts"])
        self.quarantined_tasks = dict(state["quarantined_tasks"])
        self._rng.setstate(state["rng"])
        # Checkpoints from before task pickers held the uniform order at the top level.
        self.picker.restore(state.get("picker") or {"order": state["order"], "cursor": state["cursor"]})
        self._recent_rewards.extend(state.get("recent_rewards", []))
        self._random_rewards.extend(state.get("random_rewards", []))
        self.groups_by_kind = {kind: dict(c) for kind, c in state.get("groups_by_kind", {}).items()}
        self._trained_keys = {tuple(k) for k in state["trained_keys"]}
        self._groups = {}
        for g in state["groups"]:
            group = _Group(g["group_id"], by_id[g["task_id"]], g["task_id"], g["admitted_version"], g["size"],
                           dict(g["members"]), g["dead"])
            self._groups[group.group_id] = group
        lost = [WorkItem(**{**w, "task": by_id[w["task_id"]]}) for w in state["in_flight"]]
        pending = [WorkItem(**{**w, "task": by_id[w["task_id"]]}) for w in state["pending"]]
        # In-flight work died with the old processes: it leaves the books and is admitted again.
        self.counts["admitted"] -= len(lost)
        self.counts["in_flight"] -= len(lost)
        self._pending = deque(lost + pending)
        self._in_flight = {}
        self._handed_out = {}
        self.readmitted = state["readmitted"] + len(lost)
        self.accounting()
        return len(lost)

    # -- control ----------------------------------------------------------------------
    def set_version(self, version: int) -> None:
        self.version = version

    def stop(self) -> None:
        self._stopped = True

    def live(self) -> dict:
        """What `swerve status` shows: the books, the last batch's rates and staleness, work in flight."""
        oldest = min((w.admitted_version for w in self._in_flight.values()), default=None)
        return {"accounting": self.accounting(), "last_batch": dict(self.last_batch_stats),
                "oldest_in_flight_version": oldest, "pending": len(self._pending)}

    def exhausted(self) -> Optional[str]:
        """Why no batch can ever come (None: one still can): every task of a list is quarantined, or
        a stream ran dry and its last work finished. A stream that ran dry while work is pending or
        in flight is not exhausted: that work may still complete the batch."""
        if self.table.exhausted(list(self.quarantined_tasks)):
            return f"every task is quarantined: {dict(self.quarantined_tasks)}"
        if self.picker.stream_ran_dry() and not self._pending and not self.counts["in_flight"]:
            return (f"the task stream of {self.table.stream.source} ended and every one of its tasks was "
                    f"rolled out ({self.counts['buffered']} trajectories buffered, not a whole batch)")
        return None

    def accounting(self) -> dict:
        """Counters plus the identity check; raises AccountingError when it does not hold."""
        c = self.counts
        rhs = sum(c[k] for k in COUNTERS[1:])
        if c["admitted"] != rhs or any(v < 0 for v in c.values()):
            raise AccountingError(
                f"accounting identity violated: admitted={c['admitted']} but "
                + " + ".join(f"{k}={c[k]}" for k in COUNTERS[1:]) + f" = {rhs}"
            )
        return {
            **c,
            "identity_holds": True,
            "tasks_exhausted": self.exhausted(),
            "readmitted_after_restart": self.readmitted,
            "version": self.version,
            "groups_admitted": self.groups_admitted,
            "quarantined_tasks": dict(self.quarantined_tasks),
            "admission": self.picker.stats(),
            "groups_by_kind": {kind: dict(c) for kind, c in sorted(self.groups_by_kind.items())},
        }
