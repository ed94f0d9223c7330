"""Grading's name for envs/tasks/hostile_json.py (the one implementation: it sits in the lowest
layer so that hidden-case results in envs/tasks can use it too). Reward files, reports and the
listing are parsed with it: `load_bounded(data, max_bytes, max_depth) -> value`, or
HostileJSONError (a ValueError) saying why."""
from envs.tasks.hostile_json import HostileJSONError, load_bounded, nesting_depth

__all__ = ["HostileJSONError", "load_bounded", "nesting_depth"]
