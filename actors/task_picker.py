"""Which task the collector admits next: the seam between admission and curriculum.

`uniform` walks the tasks in a fresh random order each pass (every task equally often).
`pass_rate` spends rollouts where they carry a gradient. A group's advantages are all zero when
every member gets the same reward, so a group of G attempts at a task the policy solves with
probability p is informative with probability 1 - p^G - (1-p)^G, which is largest at p = 0.5.
The picker keeps each task's success counts from its finished groups, decayed with a half-life
in policy versions (the policy moves on, and old evidence should fade), and admits the task
whose estimate gives the most informative group; an unseen task is valued by how often the
first group of a new task has been informative so far, and a share of admissions always goes
to unseen tasks, so the pool keeps being explored. A task is not admitted again at the same
policy version its last group was admitted at (a second group would learn nothing new about
it), unless nothing else is left.

Both pickers are plain, picklable state: the collector's snapshot carries them across restarts.
"""
from __future__ import annotations

import random
from typing import Collection, Optional, Protocol

PRIOR = 0.1  # pseudo-successes and pseudo-failures of every task's Beta prior


class TaskPicker(Protocol):
    def pick(self, version: int, excluded: Collection[int], busy: Collection[int]) -> Optional[int]:
        """Index of the next task to admit, never one in `excluded` (quarantined) and one in `busy`
        (a group of it is still running) only when nothing else is left; None when none is."""

    def observe(self, index: int, rewards: list[float], version: int) -> None:
        """A group of task `index` finished (its scored members' rewards) at policy `version`."""

    def stats(self) -> dict:
        """Counts for accounting.json."""

    def snapshot(self) -> dict: ...

    def restore(self, state: dict) -> None: ...


class UniformPicker:
    def __init__(self, num_tasks: int, rng: random.Random):
        self.num_tasks, self._rng = num_tasks, rng
        self._order: list[int] = []
        self._cursor = 0

    def pick(self, version: int, excluded: Collection[int], busy: Collection[int] = ()) -> Optional[int]:
        for _ in range(self.num_tasks + 1):
            if self._cursor >= len(self._order):
                self._order = list(range(self.num_tasks))
                self._rng.shuffle(self._order)
                self._cursor = 0
            index = self._order[self._cursor]
            self._cursor += 1
            if index not in excluded:
                return index
        return None

    def observe(self, index: int, rewards: list[float], version: int) -> None:
        """Uniform admission ignores outcomes."""

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
    def __init__(self, num_tasks: int, rng: random.Random, group_size: int, half_life_versions: float,
                 explore_fraction: float):
        if half_life_versions <= 0:
            raise ValueError(f"rollout.pass_rate_half_life_versions is {half_life_versions}; it must be > 0")
        self.num_tasks, self._rng, self.group_size = num_tasks, rng, group_size
        self.half_life_versions, self.explore_fraction = half_life_versions, explore_fraction
        # task index -> [decayed successes, decayed attempts, version of the counts]
        self._counts: dict[int, list] = {}
        self._last_admitted: dict[int, int] = {}
        # First groups of new tasks: how many, how many were informative (the value of exploring).
        self._first_groups = 0
        self._first_informative = 0
        self.explored = 0
        self.exploited = 0

    # -- estimates ---------------------------------------------------------------------
    def _decayed(self, index: int, version: int) -> tuple[float, float]:
        successes, attempts, at = self._counts[index]
        factor = 0.5 ** (max(0, version - at) / self.half_life_versions)
        return successes * factor, attempts * factor

    def estimate(self, index: int, version: int) -> Optional[float]:
        """Posterior mean pass rate of a seen task, None for an unseen one. The prior is weak,
        Beta(0.1, 0.1): a task is mostly either solved or not, so 0 of 8 should read as ~0, not as
        the 6% a uniform prior would leave (which would keep re-admitting hopeless tasks)."""
        if index not in self._counts:
            return None
        successes, attempts = self._decayed(index, version)
        return (successes + PRIOR) / (attempts + 2 * PRIOR)

    def explore_value(self) -> float:
        """How often a new task's first group was informative (prior 1/2 before any)."""
        return (self._first_informative + 1.0) / (self._first_groups + 2.0)

    # -- the picker --------------------------------------------------------------------
    def pick(self, version: int, excluded: Collection[int], busy: Collection[int] = ()) -> Optional[int]:
        allowed = [i for i in range(self.num_tasks) if i not in excluded]
        if not allowed:
            return None
        free = [i for i in allowed if i not in busy]
        if not free:  # every task left has a group running: admit one of them again
            return self._take(self._rng.choice(allowed), version, explored=False)
        unseen = [i for i in free if i not in self._counts and i not in self._last_admitted]
        seen = [i for i in free if i in self._counts]
        fresh = [i for i in seen if self._last_admitted.get(i, -1) < version]
        explore = bool(unseen) and self._rng.random() < self.explore_fraction
        if fresh and not explore:
            index, score = self._best(fresh, version)
            if not unseen or score >= self.explore_value():
                return self._take(index, version, explored=False)
        if unseen:
            return self._take(self._rng.choice(unseen), version, explored=True)
        if seen:  # every seen task already has a group at this version: take the best again
            return self._take(self._best(seen, version)[0], version, explored=False)
        # Only tasks whose first group has not finished yet: admit one of them again.
        return self._take(self._rng.choice(free), version, explored=False)

    def _best(self, indices: list[int], version: int) -> tuple[int, float]:
        scores = {i: informative_probability(self.estimate(i, version), self.group_size) for i in indices}
        best = max(scores.values())
        return self._rng.choice([i for i, s in scores.items() if s == best]), best

    def _take(self, index: int, version: int, explored: bool) -> int:
        self._last_admitted[index] = version
        if explored:
            self.explored += 1
        else:
            self.exploited += 1
        return index

    def observe(self, index: int, rewards: list[float], version: int) -> None:
        if not rewards:
            return
        successes = sum(1 for r in rewards if r > 0)
        if index not in self._counts:
            self._first_groups += 1
            self._first_informative += int(0 < successes < len(rewards))
            self._counts[index] = [0.0, 0.0, version]
        s, a = self._decayed(index, version)
        self._counts[index] = [s + successes, a + len(rewards), version]

    def stats(self) -> dict:
        return {"task_selection": "pass_rate", "groups_explored": self.explored,
                "groups_by_pass_rate": self.exploited, "tasks_seen": len(self._counts),
                "first_groups_informative": self._first_informative, "first_groups": self._first_groups}

    def snapshot(self) -> dict:
        return {"counts": {str(k): list(v) for k, v in self._counts.items()},
                "last_admitted": {str(k): v for k, v in self._last_admitted.items()},
                "first_groups": self._first_groups, "first_informative": self._first_informative,
                "explored": self.explored, "exploited": self.exploited}

    def restore(self, state: dict) -> None:
        self._counts = {int(k): list(v) for k, v in state["counts"].items()}
        self._last_admitted = {int(k): v for k, v in state["last_admitted"].items()}
        self._first_groups, self._first_informative = state["first_groups"], state["first_informative"]
        self.explored, self.exploited = state["explored"], state["exploited"]


def make_picker(selection: str, num_tasks: int, rng: random.Random, group_size: int,
                half_life_versions: float, explore_fraction: float) -> TaskPicker:
    if selection == "uniform":
        return UniformPicker(num_tasks, rng)
    if selection == "pass_rate":
        return PassRatePicker(num_tasks, rng, group_size, half_life_versions, explore_fraction)
    raise ValueError(f"rollout.task_selection is '{selection}'; allowed: uniform, pass_rate")
