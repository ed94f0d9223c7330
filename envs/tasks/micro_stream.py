"""The endless stream of micro tasks (`tasks.source=micro tasks.split=stream`).

Task i is drawn from its own seeded generator (`micro-stream:<seed>:<i>`), so any index is made
on the spot, in any process, and is the same forever; families come in turn (i mod 5), as in the
finite splits. Disjoint from the finite splits by construction and checked: names come from the
train split's half of the (verb, noun) pairs (never an eval function's name), the seeds differ
from the splits' seeds, and a draw that shares its buggy module, its tests or its issue with any
task of the `train` or `eval` split (envs.tasks.micro.content_keys) is drawn again.
"""
from __future__ import annotations

import random
import re
from itertools import count
from typing import Optional

from envs.tasks import micro
from envs.tasks.stream import STREAM_SPLIT
from envs.tasks.task import Task

_ID = re.compile(r"^micro-stream-(\d+)-(\d+)$")


class MicroStream:
    source = "micro"

    def __init__(self, seed: int = 0, cache_dir: Optional[str] = None):
        if seed < 0:
            raise ValueError(f"tasks.stream_seed is {seed}; it must be >= 0")
        self.seed, self.cache_dir = seed, cache_dir
        self._taken: Optional[set[str]] = None  # content keys of the finite splits, made on first use

    def task_id(self, index: int) -> str:
        return f"micro-stream-{self.seed}-{index:07d}"

    def draw(self, index: int) -> micro.MicroTask:
        """The generated task behind index `index` (no workspace written)."""
        if index < 0:
            raise IndexError(f"stream index {index} < 0")
        if self._taken is None:
            self._taken = {key for split in micro.SPLIT_SIZES for t in micro.generate(split)
                           for key in micro.content_keys(t)}
        family = micro.FAMILIES[index % len(micro.FAMILIES)]
        # The stratum is fixed before the draws: redrawing until one validates must not tilt the
        # mix (easy draws of some templates fail more often).
        easy = random.Random(f"micro-stream:{self.seed}:{index}:stratum").random() < micro.EASY_FRACTION
        for salt in count():
            rng = random.Random(f"micro-stream:{self.seed}:{index}:{salt}")
            task = micro.draw(self.task_id(index), family, rng, easy, micro.SPLIT_PARITY["train"])
            if task is not None and not micro.content_keys(task) & self._taken:
                return task
        raise AssertionError("unreachable: count() never ends")

    # -- envs.tasks.stream.TaskStream --------------------------------------------------------
    def task(self, index: int) -> Task:
        return micro.to_task(self.draw(index), micro.workspace_root(self.cache_dir), STREAM_SPLIT)

    def index_of(self, task_id: str) -> int:
        found = _ID.match(task_id)
        if found is None or int(found.group(1)) != self.seed:
            raise ValueError(f"{task_id!r} is not a task of the micro stream with seed {self.seed} "
                             f"(its ids look like {self.task_id(0)!r})")
        return int(found.group(2))

    def available(self) -> Optional[int]:
        return None  # any index is drawn on the spot

    def finished(self) -> bool:
        return False

    def close(self) -> None:
        """Nothing runs in the background."""
