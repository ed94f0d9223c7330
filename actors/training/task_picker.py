"""Which task the collector admits next: the seam between admission and curriculum.

`uniform` walks the tasks in a fresh random order each pass (every task equally often).
`pass_rate` spends rollouts where they carry a gradient. A group's advantages are all zero when
every member gets the same reward, so a group of G attempts at a task the policy solves with
probability p is informative with probability 1 - p^G - (1-p)^G, which is largest at p = 0.5.
The picker keeps each task's success counts from its finished groups, decayed with a half-life
in policy versions (the policy moves on, and old evidence should fade), and admits the task
whose estimate gives the most informative group. A task nobody has tried has no estimate of its
own: it is judged by its kind (`family/stratum`, actors/training/task_table.py), by how often a new task of
that kind gave an informative first group lately. Unseen tasks are drawn in proportion to that
value, and a share of admissions (`explore_fraction`) goes to a task at random, so no kind is left
out. A task is not admitted again at the same policy version its last group was admitted at (a
second group would learn nothing new about it), unless nothing else is left.

On a stream (envs/tasks/stream.py) every task is new: the next ones are offered in order and each is
taken with probability its kind's value over the best kind's, else passed over for good (counted),
so RL draws fresh tasks of the kinds that give a gradient now and never revisits one.

Both pickers are plain, picklable state: the collector's snapshot carries them across restarts.
"""
from __future__ import annotations

import random
from typing import Collection, Optional, Protocol

from actors.training.task_table import TaskTable

PRIOR = 0.1  # pseudo-successes and pseudo-failures of every task's Beta prior
# A stream task taken after this many offers in a row were passed over, whatever its kind.
MAX_OFFERS = 64
# How strongly a stream's offers follow their kind's value: at 2, a kind worth a fifth of the best
# is taken 1 time in 25. (At 1 the better kinds got barely half of the groups; the evidence that
# a kind gives no gradient fades with the half-life, so a passed-over kind is tried again.)
SHARPNESS = 2


class TaskPicker(Protocol):
    def pick(self, version: int, excluded: Collection[int], busy: Collection[int]) -> Optional[int]:
        """Index of the next task to admit, never one in `excluded` (quarantined) and one in `busy`
        (a group of it is still running) only when nothing else is left; None when none is."""

    def observe(self, index: int, rewards: list[float], version: int) -> None:
        """A group of task `index` finished (its scored members' rewards) at policy `version`."""

    def stats(self) -> dict:
        """Counts for accounting.json."""

    def stream_ran_dry(self) -> bool:
        """A stream that ended and whose every task was offered (always False for a list)."""

    def admitted_at_random(self, index: int) -> bool:
        """Whether task `index`'s latest admission ignored every estimate: the groups that
        measure the policy without the curriculum's bias (the collector's pass_rate_at_random)."""

    def snapshot(self) -> dict: ...

    def restore(self, state: dict) -> None: ...


class UniformPicker:
    """A list: every task once per pass, in a fresh random order each pass. A stream: in order."""

    def __init__(self, table: TaskTable, rng: random.Random):
        self.table, self._rng = table, rng
        self._order: list[int] = []
        self._cursor = 0

    def pick(self, version: int, excluded: Collection[int], busy: Collection[int] = ()) -> Optional[int]:
        if self.table.endless:
            ready = self.table.ready()
            while ready is None or self._cursor < ready:
                self._cursor += 1
                if self._cursor - 1 not in excluded:
                    return self._cursor - 1
            return None
        for _ in range(self.table.size() + 1):
            if self._cursor >= len(self._order):
                self._order = list(range(self.table.size()))
                self._rng.shuffle(self._order)
                self._cursor = 0
            index = self._order[self._cursor]
            self._cursor += 1
            if index not in excluded:
                return index
        return None

    def observe(self, index: int, rewards: list[float], version: int) -> None:
        """Uniform admission ignores outcomes."""

    def admitted_at_random(self, index: int) -> bool:
        return True

    def stream_ran_dry(self) -> bool:
        ready = self.table.ready()
        return self.table.endless and self.table.stream.finished() and ready is not None and self._cursor >= ready

    def stats(self) -> dict:
        return {"task_selection": "uniform"}

    def snapshot(self) -> dict:
        return {"order": list(self._order), "cursor": self._cursor}

    def restore(self, state: dict) -> None:
        self._order, self._cursor = list(state["order"]), state["cursor"]


def informative_probability(p: float, group_size: int) -> float:
    """Chance that a group of `group_size` attempts at success rate p gets mixed rewards."""
    return 1.0 - p ** group_size - (1.0 - p) ** group_size


class PassRatePicker:
    def __init__(self, table: TaskTable, rng: random.Random, group_size: int, half_life_versions: float,
                 explore_fraction: float):
        if half_life_versions <= 0:
            raise ValueError(f"rollout.pass_rate_half_life_versions is {half_life_versions}; it must be > 0")
        self.table, self._rng, self.group_size = table, rng, group_size
        self.half_life_versions, self.explore_fraction = half_life_versions, explore_fraction
        # task index -> [decayed successes, decayed attempts, version of the counts]
        self._counts: dict[int, list] = {}
        # kind -> [first groups, informative ones, successes, attempts, version], decayed: how often
        # a new task of that kind gave a gradient lately, and how often it was solved.
        self._kinds: dict[str, list] = {}
        self._last_admitted: dict[int, int] = {}
        self._next_fresh = 0  # a stream's next index never offered
        self.explored = 0  # groups of tasks never admitted before
        self.exploited = 0  # groups of seen tasks, chosen by their own estimate
        self.at_random = 0  # of the explored: chosen at random (explore_fraction), not by kind
        self.passed_over = 0  # stream tasks offered and not taken (their kind gave little gradient)
        self.tasks_seen = 0  # tasks whose first group finished
        self._at_random: set[int] = set()  # tasks whose latest admission was at random

    # -- estimates ---------------------------------------------------------------------
    def _factor(self, since: int, version: int) -> float:
        return 0.5 ** (max(0, version - since) / self.half_life_versions)

    def _decayed(self, index: int, version: int) -> tuple[float, float]:
        successes, attempts, at = self._counts[index]
        factor = self._factor(at, version)
        return successes * factor, attempts * factor

    def estimate(self, index: int, version: int) -> Optional[float]:
        """Posterior mean pass rate of a seen task, None for an unseen one. The prior is weak,
        Beta(0.1, 0.1): a task is mostly either solved or not, so 0 of 8 should read as ~0, not as
        the 6% a uniform prior would leave (which would keep re-admitting hopeless tasks)."""
        if index not in self._counts:
            return None
        successes, attempts = self._decayed(index, version)
        return (successes + PRIOR) / (attempts + 2 * PRIOR)

    def kind_value(self, kind: str, version: int) -> float:
        """How often a new task of this kind gave an informative first group lately (1/2 before any):
        what a task nobody has tried is worth."""
        groups, informative = self._kind_decayed(kind, version)[:2]
        return (informative + 1.0) / (groups + 2.0)

    def kind_pass_rate(self, kind: str, version: int) -> Optional[float]:
        successes, attempts = self._kind_decayed(kind, version)[2:]
        return successes / attempts if attempts else None

    def _kind_decayed(self, kind: str, version: int) -> list[float]:
        if kind not in self._kinds:
            return [0.0, 0.0, 0.0, 0.0]
        *values, at = self._kinds[kind]
        factor = self._factor(at, version)
        return [v * factor for v in values]

    # -- the picker --------------------------------------------------------------------
    def pick(self, version: int, excluded: Collection[int], busy: Collection[int] = ()) -> Optional[int]:
        if self.table.endless:
            return self._pick_fresh(version, excluded)
        allowed = [i for i in range(self.table.size()) if i not in excluded]
        if not allowed:
            return None
        free = [i for i in allowed if i not in busy]
        if not free:  # every task left has a group running: admit one of them again
            return self._take(self._rng.choice(allowed), version, explored=False)
        unseen = [i for i in free if i not in self._counts and i not in self._last_admitted]
        seen = [i for i in free if i in self._counts]
        fresh = [i for i in seen if self._last_admitted.get(i, -1) < version]
        if unseen and self._rng.random() < self.explore_fraction:
            return self._take(self._rng.choice(unseen), version, explored=True, at_random=True)
        new = self._by_kind(unseen, version) if unseen else None
        if fresh:
            index, score = self._best(fresh, version)
            if new is None or score >= self.kind_value(self.table.kind(new), version):
                return self._take(index, version, explored=False)
        if new is not None:
            return self._take(new, version, explored=True)
        if seen:  # every seen task already has a group at this version: take the best again
            return self._take(self._best(seen, version)[0], version, explored=False)
        # Only tasks whose first group has not finished yet: admit one of them again.
        return self._take(self._rng.choice(free), version, explored=False)

    def _by_kind(self, indices: list[int], version: int) -> int:
        """One of the unseen tasks, drawn in proportion to its kind's value ** SHARPNESS: kinds that
        give a gradient are preferred, and none is ever left out."""
        weights = [self.kind_value(self.table.kind(i), version) ** SHARPNESS for i in indices]
        return self._rng.choices(indices, weights=weights)[0]

    def _pick_fresh(self, version: int, excluded: Collection[int]) -> Optional[int]:
        """A stream's next tasks are offered in order; each is taken with probability (its kind's
        value over the best kind's) ** SHARPNESS (or always, for an explore_fraction share), else
        passed over and never offered again. So rollouts go mostly to the kinds that give a gradient
        now, every kind stays measured, and every task is new."""
        ready = self.table.ready()
        best = max([self.kind_value(kind, version) for kind in self._kinds] + [0.5])
        explore = self._rng.random() < self.explore_fraction
        for _ in range(MAX_OFFERS):
            index = self._next_fresh
            if ready is not None and index >= ready:
                return None  # the stream is making more; the episode asks again
            self._next_fresh += 1
            if index in excluded:
                continue
            if explore or self._rng.random() <= (self.kind_value(self.table.kind(index), version) / best) ** SHARPNESS:
                return self._take(index, version, explored=True, at_random=explore)
            self.passed_over += 1
        return self._take(self._next_fresh - 1, version, explored=True)

    def stream_ran_dry(self) -> bool:
        """A stream that ended and whose every task was offered."""
        ready = self.table.ready()
        return self.table.endless and self.table.stream.finished() and ready is not None \
            and self._next_fresh >= ready

    def _best(self, indices: list[int], version: int) -> tuple[int, float]:
        scores = {i: informative_probability(self.estimate(i, version), self.group_size) for i in indices}
        best = max(scores.values())
        return self._rng.choice([i for i, s in scores.items() if s == best]), best

    def _take(self, index: int, version: int, explored: bool, at_random: bool = False) -> int:
        self._last_admitted[index] = version
        if at_random:
            self.at_random += 1
            self._at_random.add(index)
        else:
            self._at_random.discard(index)
        if explored:
            self.explored += 1
        else:
            self.exploited += 1
        return index

    def admitted_at_random(self, index: int) -> bool:
        return index in self._at_random

    def observe(self, index: int, rewards: list[float], version: int) -> None:
        if not rewards:
            return
        successes = sum(1 for r in rewards if r > 0)
        if self.table.endless or index not in self._counts:  # a task's first group: its kind learns
            kind = self.table.kind(index)
            groups, informative, kind_s, kind_a = self._kind_decayed(kind, version)
            self._kinds[kind] = [groups + 1, informative + int(0 < successes < len(rewards)),
                                 kind_s + successes, kind_a + len(rewards), version]
            self.tasks_seen += 1
        if self.table.endless:
            # A stream task is never offered again: no per-task evidence to keep.
            self._last_admitted.pop(index, None)
            self._at_random.discard(index)
            return
        s, a = self._decayed(index, version) if index in self._counts else (0.0, 0.0)
        self._counts[index] = [s + successes, a + len(rewards), version]

    def stats(self) -> dict:
        version = max((v[-1] for v in self._kinds.values()), default=0)
        first_groups = sum(v[0] for v in self._kinds.values())
        return {"task_selection": "pass_rate", "groups_explored": self.explored,
                "groups_by_pass_rate": self.exploited, "groups_at_random": self.at_random,
                "stream_passed_over": self.passed_over, "tasks_seen": self.tasks_seen,
                "kinds": {kind: {"value": round(self.kind_value(kind, version), 3),
                                 "pass_rate": round(self.kind_pass_rate(kind, version) or 0.0, 3)}
                          for kind in sorted(self._kinds)},
                "first_groups_decayed": round(first_groups, 2)}

    def snapshot(self) -> dict:
        return {"counts": {str(k): list(v) for k, v in self._counts.items()},
                "kinds": {k: list(v) for k, v in self._kinds.items()},
                "last_admitted": {str(k): v for k, v in self._last_admitted.items()},
                "next_fresh": self._next_fresh, "explored": self.explored, "exploited": self.exploited,
                "at_random": self.at_random, "passed_over": self.passed_over, "tasks_seen": self.tasks_seen,
                "at_random_tasks": sorted(self._at_random)}

    def restore(self, state: dict) -> None:
        self._counts = {int(k): list(v) for k, v in state["counts"].items()}
        self._kinds = {k: list(v) for k, v in state["kinds"].items()}
        self._last_admitted = {int(k): v for k, v in state["last_admitted"].items()}
        self._next_fresh = state["next_fresh"]
        self.explored, self.exploited = state["explored"], state["exploited"]
        self.at_random, self.passed_over = state["at_random"], state["passed_over"]
        self.tasks_seen = state["tasks_seen"]
        self._at_random = set(state.get("at_random_tasks", []))  # absent from snapshots before it existed


def make_picker(selection: str, table: TaskTable, rng: random.Random, group_size: int,
                half_life_versions: float, explore_fraction: float) -> TaskPicker:
    if selection == "uniform":
        return UniformPicker(table, rng)
    if selection == "pass_rate":
        return PassRatePicker(table, rng, group_size, half_life_versions, explore_fraction)
    raise ValueError(f"rollout.task_selection is '{selection}'; allowed: uniform, pass_rate")
