"""Endless task sources: RL draws fresh tasks instead of revisiting a small pool.

A fixed pool of training tasks is memorised: a policy that sees the same 60 tasks over and over
learns them, not the skill (train pass rate up, held-out pass rate flat). A stream hands out tasks
that were never rolled out before, so each is one group and rarely seen again, and the pass rate
on them is a live held-out estimate.

A stream is addressed by index: `task(i)` is the same task for the same index forever (seeded),
made on first use, so a restarted run finds the tasks of its checkpoint again by id
(`index_of`). Streams are the split `stream` of the sources that have one (`tasks.split=stream`):
`micro` (generated one-function bugs, envs/tasks/micro_stream.py) and a local Python repository with
`tasks.format=synth` (procedural bugs injected into it, SWE-smith style, envs/tasks/synth/stream.py).
Each stream's tasks are disjoint from the source's finite splits (eval, and the tasks SFT traces
use) by construction, and checked by content.
"""
from __future__ import annotations

from typing import Optional, Protocol

from envs.tasks.task import Task

STREAM_SPLIT = "stream"


class TaskStream(Protocol):
    # Which source the stream draws from ("micro", or the repository's path): for messages.
    source: str

    def task(self, index: int) -> Task:
        """The index-th task (0, 1, ...); the same task for the same index on every call and in
        every process. May block while it is made: ask `available()` first where that matters."""

    def index_of(self, task_id: str) -> int:
        """The index of a task this stream made; ValueError naming the id for any other."""

    def available(self) -> Optional[int]:
        """How many tasks can be had now without waiting: None when any index can (generated on
        the spot); a count when they are made ahead, in the background."""

    def finished(self) -> bool:
        """True once no task beyond `available()` will ever come (a repository's bugs ran out)."""

    def close(self) -> None:
        """Stop making tasks ahead (background work ends); tasks already made stay readable."""
