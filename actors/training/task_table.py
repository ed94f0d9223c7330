"""The collector's tasks by index: a fixed list, or an endless stream (envs/tasks/stream.py).

The collector and its task picker speak indices; this table turns them into tasks, ids and
kinds. A list's indices are 0..n-1. A stream's are its own (task i is the same task forever), made
on demand and kept only while recently used: a run that draws thousands of tasks holds a few.
A task's kind (`family/stratum`) is what tasks share: a fresh task has no history of its own, so
the picker judges it by its kind's.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Optional, Sequence, Union

from envs.tasks.stream import TaskStream
from envs.tasks.task import Task

# Stream tasks kept made (the picker's window and the groups in flight are far fewer).
KEEP_MADE = 4096


def kind_of(task) -> str:
    """What a task shares with others: its family and stratum ("" for tasks that name neither)."""
    if not isinstance(task, Task) or not (task.family or task.stratum):
        return ""
    return f"{task.family}/{task.stratum}"


class TaskTable:
    def __init__(self, tasks: Union[Sequence, TaskStream], task_ids: Sequence[str] = ()):
        """`tasks`: a list (with `task_ids`, one per task, or each task's own `id`) or a stream."""
        if isinstance(tasks, (list, tuple)):
            if not tasks:
                raise ValueError("the task set is empty: check tasks.source / tasks.split / tasks.ids")
            self.stream: Optional[TaskStream] = None
            self._tasks = list(tasks)
            self._ids = list(task_ids) if task_ids else [t.id for t in tasks]
            if len(self._ids) != len(self._tasks):
                raise ValueError(f"{len(self._tasks)} tasks but {len(self._ids)} task ids")
            self._index_of = {task_id: i for i, task_id in enumerate(self._ids)}
        else:
            self.stream = tasks
            self._made: OrderedDict[int, Task] = OrderedDict()

    @property
    def endless(self) -> bool:
        return self.stream is not None

    def size(self) -> Optional[int]:
        """How many tasks (None: a stream)."""
        return None if self.stream is not None else len(self._tasks)

    def task(self, index: int):
        if self.stream is None:
            return self._tasks[index]
        if index in self._made:
            self._made.move_to_end(index)
        else:
            self._made[index] = self.stream.task(index)
            while len(self._made) > KEEP_MADE:
                self._made.popitem(last=False)
        return self._made[index]

    def task_id(self, index: int) -> str:
        return self._ids[index] if self.stream is None else self.task(index).id

    def index_of(self, task_id: str) -> int:
        """The index of a task of this table; ValueError naming the id for any other."""
        if self.stream is not None:
            return self.stream.index_of(task_id)
        if task_id not in self._index_of:
            raise ValueError(f"task {task_id!r} is not in this task set")
        return self._index_of[task_id]

    def has(self, task_id: str) -> bool:
        try:
            self.index_of(task_id)
        except ValueError:
            return False
        return True

    def kind(self, index: int) -> str:
        return kind_of(self.task(index))

    def ready(self) -> Optional[int]:
        """How many stream tasks can be had without waiting (None: any); a list: all of them."""
        return len(self._tasks) if self.stream is None else self.stream.available()

    def exhausted(self, quarantined: Sequence[str]) -> bool:
        """Every task of a list is quarantined. (A stream runs dry only when it ended and its picker
        offered every task: the picker's `stream_ran_dry`.)"""
        return self.stream is None and len(set(quarantined) & set(self._ids)) == len(set(self._ids))

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
