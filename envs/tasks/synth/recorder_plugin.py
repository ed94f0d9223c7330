"""pytest plugin that records calls to a repository's module-level functions during its tests.

Loaded by envs/tasks/synth/call_recorder.py into one clean test run (`-p swerve_call_recorder`, from a
private folder on PYTHONPATH so none of swerve's modules shadow the repository's); standard library
only, since it runs under the repository's interpreter. SWERVE_CALL_RECORDER names a JSON file:

    in:  {"files": {<real path of a watched file>: <its dotted module>},
          "max_calls_per_function": N, "max_seen_per_function": M, "max_call_chars": C,
          "out": <where the recording goes>}
    out: [[module, function, args_json, result_json], ...]

A call is kept when its positional arguments (taken when the call starts, before the function can
change them) and its return value are plain JSON by exact type. The profiler only runs during a
test's call phase, and gives up on a function after `max_seen_per_function` calls, so a hot helper
costs a bounded number of JSON encodings.
"""
import json
import math
import os
import sys

import pytest

_CONFIG_ENV = "SWERVE_CALL_RECORDER"
# A value with more nodes than this is refused before it is encoded: its JSON would exceed any
# sensible per-call size anyway, and walking it must stay cheap.
_MAX_NODES = 512
_UNPLAIN_FLAGS = 0x20 | 0x80 | 0x100 | 0x200  # generator, coroutine, iterable coroutine, async generator
_VARIADIC_FLAGS = 0x04 | 0x08  # *args, **kwargs: a positional replay cannot reproduce the call


def plain_json(value, max_chars):
    """JSON text of value when it is plain JSON by exact type and at most max_chars long, else None."""
    stack, nodes = [value], 0
    while stack:
        item = stack.pop()
        nodes += 1
        if nodes > _MAX_NODES:
            return None
        kind = type(item)
        if kind is float:
            if not math.isfinite(item):
                return None
        elif kind is list:
            stack.extend(item)
        elif kind is dict:
            if any(type(key) is not str for key in item):
                return None
            stack.extend(item.values())
        elif not (item is None or kind in (bool, int, str)):
            return None
    text = json.dumps(value)
    return text if len(text) <= max_chars else None


class Recorder:
    def __init__(self, config):
        self.modules = config["files"]
        self.max_calls = config["max_calls_per_function"]
        self.max_seen = config["max_seen_per_function"]
        self.max_chars = config["max_call_chars"]
        self.watched = {}  # code object -> (module, function), or None when not watched
        self.seen = {}  # (module, function) -> calls looked at
        self.kept = {}  # (module, function) -> {args_json: result_json}
        self.pending = {}  # id(frame) -> (key, args_json) for calls not returned yet

    def watch(self, frame):
        """(module, function) when frame's code is a module-level function of a watched file."""
        code = frame.f_code
        if code not in self.watched:
            self.watched[code] = self._key(code, frame.f_globals)
        return self.watched[code]

    def _key(self, code, module_globals):
        module = self.modules.get(os.path.realpath(code.co_filename))
        if module is None or code.co_flags & (_UNPLAIN_FLAGS | _VARIADIC_FLAGS) or code.co_kwonlyargcount:
            return None
        # Only what `getattr(module, name)` reaches is callable by the hidden runner: not a
        # method, a nested function, or a decorated one (its wrapper is what the name holds).
        function = module_globals.get(code.co_name)
        if getattr(function, "__code__", None) is not code:
            return None
        return module, code.co_name

    def profile(self, frame, event, arg):
        if event == "call":
            key = self.watch(frame)
            if key is not None:
                self._enter(frame, key)
        elif event == "return" and self.pending:
            entered = self.pending.pop(id(frame), None)
            if entered is not None:
                self._leave(entered, arg)

    def _enter(self, frame, key):
        seen = self.seen.get(key, 0)
        kept = self.kept.setdefault(key, {})
        if seen >= self.max_seen or len(kept) >= self.max_calls:
            return
        self.seen[key] = seen + 1
        code = frame.f_code
        args = [frame.f_locals[name] for name in code.co_varnames[:code.co_argcount]]
        args_json = plain_json(args, self.max_chars)
        if args_json is not None and args_json not in kept:
            self.pending[id(frame)] = (key, args_json)

    def _leave(self, entered, value):
        key, args_json = entered
        kept = self.kept[key]
        # A call that raised returns None here too: the host's clean replay drops it.
        result_json = plain_json(value, self.max_chars - len(args_json))
        if result_json is not None and len(kept) < self.max_calls:
            kept.setdefault(args_json, result_json)

    def recording(self):
        return [[module, function, args_json, result_json]
                for (module, function), calls in self.kept.items()
                for args_json, result_json in calls.items()]


_recorder = None


def pytest_configure(config):
    global _recorder
    with open(os.environ[_CONFIG_ENV], encoding="utf-8") as handle:
        _recorder = Recorder(json.load(handle))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    previous = sys.getprofile()
    sys.setprofile(_recorder.profile)
    try:
        yield
    finally:
        sys.setprofile(previous)
        _recorder.pending.clear()  # a call the test left unfinished (an exception) never returns


def pytest_unconfigure(config):
    with open(os.environ[_CONFIG_ENV], encoding="utf-8") as handle:
        out = json.load(handle)["out"]
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(_recorder.recording(), handle)
