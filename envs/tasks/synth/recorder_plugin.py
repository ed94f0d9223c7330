"""pytest plugin that records calls to a repository's functions and methods during its tests.

Loaded by envs/tasks/synth/call_recorder.py into one clean test run (`-p swerve_call_recorder`, from a
private folder on PYTHONPATH so none of swerve's modules shadow the repository's); standard library
only, since it runs under the repository's interpreter. SWERVE_CALL_RECORDER names a JSON file:

    in:  {"files": {<real path of a watched file>: <its dotted module>},
          "max_calls_per_function": N, "max_seen_per_function": M, "max_call_chars": C,
          "max_steps": S, "out": <where the recording goes>}
    out: [[module, function, args_json, result_json, init_json, steps_json], ...]
         (result_json "!raised" for a call that raised)

A call is kept when its positional arguments (taken when the call starts, before the function can
change them) and its return value are plain JSON by exact type. Module-level functions, static and
class methods (function "Class.method", init_json "") are called as they are. An instance method
(init_json a list) is kept only on a receiver the grader's runner can rebuild: an instance of
exactly that class, constructed through the class's own Python __init__ with plain arguments (or, for a class
with neither __init__ nor __new__ of its own, holding no attribute yet),
then given at most S top-level calls of its watched methods with plain arguments (steps_json),
and whose attributes at the call are what they were after the last of those (each attribute's
plain JSON, or the identity of a value that is not plain): a change made any other way drops the
instance. Whether the rebuilt receiver behaves alike is checked by the host's clean replay.

The profiler only runs during a test's setup and call phases, and gives up on a function (or a
class's constructions) after `max_seen_per_function` calls, so a hot helper costs a bounded number
of JSON encodings.
"""
import json
import os
import sys
import types

import pytest
from swerve_recorder_values import RAISED, THREW, UNSET, plain_json, resolve, returned, state_of

_CONFIG_ENV = "SWERVE_CALL_RECORDER"
_UNPLAIN_FLAGS = 0x20 | 0x80 | 0x100 | 0x200  # generator, coroutine, iterable coroutine, async generator
_VARIADIC_FLAGS = 0x04 | 0x08  # *args, **kwargs: a positional replay cannot reproduce the call


class Life:
    """What is known of one tracked instance: how to rebuild it, and its state since."""
    __slots__ = ("cls", "init_json", "steps", "state", "depth", "running")

    def __init__(self, cls, init_json, state):
        self.cls, self.init_json, self.steps, self.state = cls, init_json, [], state
        self.depth, self.running = 0, None  # calls on it under way; the outermost, a step once it returns


class Recorder:
    def __init__(self, config):
        self.modules = config["files"]
        self.max_calls = config["max_calls_per_function"]
        self.max_seen = config["max_seen_per_function"]
        self.max_chars = config["max_call_chars"]
        self.max_steps = config["max_steps"]
        self.scanned = set()  # names in sys.modules looked at for watched classes
        self.watched = {}  # code object -> (key, kind, class), or None when not watched
        self.inits = {}  # __init__ code object -> {class: its dotted name} for the classes it builds
        self.defaults = {}  # code object of a watched function, method or __init__ -> its __defaults__
        self.seen = {}  # (module, function) -> calls (or constructions) looked at
        self.kept = {}  # (module, function) -> {(init_json, steps_json, args_json): result_json}
        self.pending = {}  # id(frame) -> what its return completes
        self.lives = {}  # id(instance) -> Life

    def discover(self):
        """Index the methods and constructors of the classes of watched files imported since,
        found by file: the tests may import a file under another name than the runner will
        (a src layout's `pkg.mod` is the runner's `src.pkg.mod`)."""
        for imported, module in list(sys.modules.items()):
            if imported in self.scanned:
                continue
            self.scanned.add(imported)
            path = getattr(module, "__file__", None)
            replayed = self.modules.get(os.path.realpath(path)) if type(path) is str else None
            if replayed is None:
                continue
            classes = [value for value in list(vars(module).values())
                       if isinstance(value, type) and value.__module__ == imported]
            while classes:
                cls = classes.pop()
                if resolve(module, cls.__qualname__) is cls:  # what the runner's "Class.method" reaches
                    self._index(replayed, cls)
                classes.extend(value for value in vars(cls).values()
                               if isinstance(value, type) and value.__qualname__.startswith(cls.__qualname__ + "."))

    def _index(self, module_name, cls):
        for name, member in list(vars(cls).items()):
            kind = {staticmethod: "static", classmethod: "class"}.get(type(member), "method")
            function = member.__func__ if kind != "method" else member
            code = getattr(function, "__code__", None)
            # Defined in the class body under this name (not a module function bound as an
            # attribute), so getattr(receiver, name) reaches this very code.
            if (name == "__init__" or not isinstance(code, types.CodeType) or not self._plain_signature(code)
                    or getattr(function, "__qualname__", None) != f"{cls.__qualname__}.{name}"
                    or (kind != "static" and code.co_argcount == 0)):
                continue
            self.watched[code] = ((module_name, f"{cls.__qualname__}.{name}"), kind, cls)
            self.defaults[code] = function.__defaults__ or ()
        init_function = getattr(cls, "__init__", None)
        init = getattr(init_function, "__code__", None)
        if isinstance(init, types.CodeType) and init.co_argcount and self._plain_signature(init):
            self.inits.setdefault(init, {})[cls] = (module_name, f"{cls.__qualname__}.__init__")
            self.defaults[init] = getattr(init_function, "__defaults__", None) or ()

    @staticmethod
    def _plain_signature(code):
        return not (code.co_flags & (_UNPLAIN_FLAGS | _VARIADIC_FLAGS) or code.co_kwonlyargcount)

    def _key(self, code, module_globals):
        module = self.modules.get(os.path.realpath(code.co_filename))
        if module is None or not self._plain_signature(code):
            return None
        # Only what `getattr(module, name)` reaches is callable by the hidden runner: not a
        # nested function, or a decorated one (its wrapper is what the name holds).
        function = module_globals.get(code.co_name)
        if getattr(function, "__code__", None) is not code:
            return None
        self.defaults[code] = function.__defaults__ or ()
        return (module, code.co_name), "function", None

    def profile(self, frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code in self.inits:
                self._construct(frame, self.inits[code])
                return
            if code not in self.watched:
                self.watched[code] = self._key(code, frame.f_globals)
            target = self.watched[code]
            if target is not None:
                self._enter(frame, *target)
        elif event == "return" and self.pending:
            entered = self.pending.pop(id(frame), None)
            if entered is not None:
                entered(arg if returned(frame) else THREW)

    def _encode_args(self, frame, key, skip):
        seen = self.seen.get(key, 0)
        if seen >= self.max_seen:
            return None
        self.seen[key] = seen + 1
        code, local = frame.f_code, frame.f_locals
        names = list(code.co_varnames[skip:code.co_argcount])
        defaults = self.defaults.get(code, ())
        # A trailing parameter holding its very default is left to the default: the call reads
        # the same without it, and a default that is no plain value (a sentinel, a shared empty
        # map) does not make the call unrecordable.
        first_default = code.co_argcount - len(defaults)
        while names and len(names) + skip > first_default and (
                local[names[-1]] is defaults[len(names) + skip - 1 - first_default]):
            names.pop()
        return plain_json([local[name] for name in names], self.max_chars)

    def _construct(self, frame, classes):
        receiver = frame.f_locals[frame.f_code.co_varnames[0]]
        if type(receiver) not in classes:
            return  # a base class's __init__ reached through super(): the outer one is recorded
        self.lives.pop(id(receiver), None)  # a new object at a freed one's address
        init_json = self._encode_args(frame, classes[type(receiver)], 1)
        if init_json is not None:
            self.pending[id(frame)] = lambda value: value is THREW or self._born(receiver, init_json)

    def _born(self, receiver, init_json):
        self.lives[id(receiver)] = Life(type(receiver), init_json, state_of(receiver, self.max_chars))

    def _enter(self, frame, key, kind, cls):
        if kind == "function" or kind == "static":
            self._call(frame, key, 0, "", "", None)
            return
        receiver = frame.f_locals[frame.f_code.co_varnames[0]]
        if kind == "class":
            if receiver is cls:
                self._call(frame, key, 1, "", "", None)
            return
        life = self.lives.get(id(receiver))
        if life is None and type(receiver) is cls and cls.__init__ is object.__init__ and cls.__new__ is object.__new__:
            life = self._bare(receiver)
        if life is None or type(receiver) is not life.cls:
            return
        # Checked before the state is: a hot method stops costing snapshots with its budget.
        if cls is not life.cls or self.seen.get(key, 0) >= self.max_seen or (
                state_of(receiver, self.max_chars) != life.state):
            del self.lives[id(receiver)]  # changed, or called, in a way the steps do not replay
            return
        top = life.depth == 0
        # A call made inside another on the same receiver sees the state before the outer one's
        # step: the outer call becomes a step only when it returns.
        args_json = self._call(frame, key, 1, life.init_json, json.dumps(life.steps),
                               lambda value: self._after(receiver, life, value))
        if args_json is None or (top and len(life.steps) >= self.max_steps):
            del self.lives[id(receiver)]
            return
        life.depth += 1
        if top:
            life.running = [frame.f_code.co_name, json.loads(args_json)]

    def _bare(self, receiver):
        """A Life for an instance of a class built without arguments or code of its own, while
        nothing is set on it yet: it is what `Class()` makes, however it was made."""
        state = state_of(receiver, self.max_chars)
        if any(value != ("id", id(UNSET)) for _, value in state):
            return None
        life = self.lives[id(receiver)] = Life(type(receiver), "[]", state)
        return life

    def _after(self, receiver, life, value):
        life.depth -= 1
        if life.depth == 0 and self.lives.get(id(receiver)) is life:
            if value is THREW:  # the runner stops at a step that raises: no later call is replayable
                del self.lives[id(receiver)]
                return
            life.steps.append(life.running)
            life.state = state_of(receiver, self.max_chars)

    def _call(self, frame, key, skip, init_json, steps_json, then):
        """Records the call's arguments for its return (then `then()`); their JSON, or None when
        the call cannot be recorded (the function's budget is spent, or they are not plain)."""
        kept = self.kept.setdefault(key, {})
        if len(kept) >= self.max_calls:
            return None
        args_json = self._encode_args(frame, key, skip)
        if args_json is None:
            return None
        room = self.max_chars - len(args_json) - len(init_json) - len(steps_json)
        call = (init_json, steps_json, args_json)
        record = room > 0 and call not in kept
        if record or then is not None:
            self.pending[id(frame)] = lambda value: (record and self._leave(key, call, value, room),
                                                     then and then(value))
        return args_json

    def _leave(self, key, call, value, room):
        kept = self.kept[key]
        # Which exception a call raised is not known here: the host's clean replay names it.
        result_json = RAISED if value is THREW else plain_json(value, room)
        if result_json is not None and len(kept) < self.max_calls:
            kept.setdefault(call, result_json)

    def recording(self):
        return [[module, function, args_json, result_json, init_json, steps_json]
                for (module, function), calls in self.kept.items()
                for (init_json, steps_json, args_json), result_json in calls.items()]


_recorder = None


def pytest_configure(config):
    global _recorder
    with open(os.environ[_CONFIG_ENV], encoding="utf-8") as handle:
        _recorder = Recorder(json.load(handle))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _profiled()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _profiled()


def _profiled():
    _recorder.discover()
    previous = sys.getprofile()
    sys.setprofile(_recorder.profile)
    try:
        yield
    finally:
        sys.setprofile(previous)
        # A call the test left unfinished (an exception) never returns: its receiver's state is unknown.
        _recorder.pending.clear()
        _recorder.lives = {key: life for key, life in _recorder.lives.items() if life.depth == 0}


def pytest_unconfigure(config):
    with open(os.environ[_CONFIG_ENV], encoding="utf-8") as handle:
        out = json.load(handle)["out"]
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(_recorder.recording(), handle)
