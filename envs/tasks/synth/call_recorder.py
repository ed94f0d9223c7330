"""Hidden cases for synthesized tasks, from calls the repository's own tests make.

One clean baseline run of the suite loads envs/tasks/synth/recorder_plugin.py, which records calls to
the module-level functions, static and class methods, and methods of the files mutations are drawn
from, when their arguments, and their return value unless they raised, are plain JSON (at most
MAX_CALLS_PER_FUNCTION distinct calls per function, each call at most MAX_CALL_CHARS of JSON). A
method's call carries how its receiver is rebuilt: the plain arguments it was constructed with
(init) and at most MAX_STEPS earlier method calls on it (steps), recorded only while the
receiver's state is what those made. `CallRecorder.book` replays them on the clean copy with the
grader's own runner (envs/tasks/hidden_runner.py, `python -I -B`, the repository root on sys.path,
as the grader runs it) and keeps the calls that reproduce their recorded value, or that raised in
the tests and raise an exception class the runner can name: what a test saw, what the grader can
import and what does not depend on the process it ran in.

For a kept mutation inside function or method F (or a function nested in it), `CallBook.cases`
replays F's calls on the mutated copy (inside a method no call of which was recorded, such as
__init__ or a helper the class's public methods call: up to MAX_CALLS_PER_FUNCTION calls of the
class's other methods, taken in turn); the hidden cases are up to MAX_DIFFERING calls whose
outcome changed and up to MAX_AGREEING that did not, each expecting its CLEAN outcome. None
differ: no hidden cases (the task is still made; its tests grade it as before).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from envs.tasks.hidden_cases import RUNNER_SOURCE, canonical, runner_entry
from envs.tasks.task import HiddenCase

PLUGIN_NAME = "swerve_call_recorder"
PLUGIN_SOURCE = (Path(__file__).resolve().parent / "recorder_plugin.py").read_text()
# The plugin imports its value helpers under this name, from the same private folder.
VALUES_SOURCE = (Path(__file__).resolve().parent / "recorder_values.py").read_text()
CONFIG_ENV = "SWERVE_CALL_RECORDER"
MAX_CALLS_PER_FUNCTION = 20
# Calls of one function looked at (encoded) before the recorder gives up on it: bounds the cost
# of a helper the suite calls thousands of times with repeated or unplain arguments.
MAX_SEEN_PER_FUNCTION = 200
MAX_CALL_CHARS = 2048
MAX_DIFFERING = 3
MAX_AGREEING = 1
# Method calls replayed on a receiver before the recorded one: each is one more call the case's
# value depends on, and one more chance for the rebuilt receiver to differ from the recorded one.
MAX_STEPS = 4

# Part of a synth stream's key (envs/tasks/synth/stream.py): rows made without hidden cases, or under
# other bounds, are not resumed after as if they were the same stream.
SETTINGS = {"version": 2, "max_calls_per_function": MAX_CALLS_PER_FUNCTION,
            "max_seen_per_function": MAX_SEEN_PER_FUNCTION, "max_call_chars": MAX_CALL_CHARS,
            "max_differing": MAX_DIFFERING, "max_agreeing": MAX_AGREEING, "max_steps": MAX_STEPS}

# The recording's result for a call that raised (recorder_plugin.py), and the prefix of an
# outcome that is a raised class (neither can start JSON text).
RAISED = "!raised"
RAISES = "!raises "

# Why a kept task got no hidden cases (counted in the synthesis stats).
NO_CALLS = "no_recorded_call"
NOT_DISTINGUISHED = "not_distinguished"
REPLAY_FAILED = "replay_failed"


def module_name(rel: str) -> str:
    """Dotted module of a repository-relative .py path, as `python -I` with the repository root on
    sys.path imports it (a src layout keeps its `src.` prefix: the grader's runner adds nothing
    else to sys.path)."""
    parts = rel[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@dataclass(frozen=True)
class CleanCall:
    args_json: str
    outcome: str  # the clean outcome: canonical JSON of the value, or RAISES + "module.qualname"
    init_json: str = ""  # the receiver's constructor arguments; "" for a call without one
    steps_json: str = ""  # [[method, args], ...] made on the receiver first


Call = Tuple[str, str, CleanCall]  # module, function, the call


@dataclass
class CallBook:
    """Reproducible clean calls, by (module, function)."""
    calls: Dict[Tuple[str, str], List[CleanCall]] = field(default_factory=dict)

    def count(self) -> int:
        return sum(len(calls) for calls in self.calls.values())

    def calls_for(self, file: str, scope: str) -> List[Call]:
        """The calls that reach a mutation in `file` inside `scope` (its enclosing qualified name):
        those of the longest prefix of the scope with recorded calls (the function or method; a
        function nested in it has none), else, inside a method, the calls of the class's other methods."""
        module, parts = module_name(file), scope.split(".") if scope else []
        for end in range(len(parts), 0, -1):
            function = ".".join(parts[:end])
            if (module, function) in self.calls:
                return [(module, function, call) for call in self.calls[(module, function)]]
        owners = {".".join(parts[:end]) for end in range(1, len(parts))}
        by_method = [[(module, function, call) for call in calls]
                     for (where, function), calls in sorted(self.calls.items())
                     if where == module and function.rpartition(".")[0] in owners]
        in_turn = [call for round_ in zip_longest(*by_method) for call in round_ if call is not None]
        return in_turn[:MAX_CALLS_PER_FUNCTION]

    def cases(self, workdir: Path, file: str, scope: str, python: str,
              timeout_s: float) -> Tuple[List[dict], Optional[str]]:
        """(hidden cases as row entries, None) for the mutated copy in workdir, or ([], why not)."""
        calls = self.calls_for(file, scope)
        if not calls:
            return [], NO_CALLS
        outcomes = replay(workdir, calls, python, timeout_s)
        if outcomes is None:
            return [], REPLAY_FAILED
        differing = [call for call, value in zip(calls, outcomes) if value != call[2].outcome]
        if not differing:
            return [], NOT_DISTINGUISHED
        agreeing = [call for call, value in zip(calls, outcomes) if value == call[2].outcome]
        chosen = set(differing[:MAX_DIFFERING] + agreeing[:MAX_AGREEING])
        return [row_entry(*call) for call in calls if call in chosen], None


def row_entry(module: str, function: str, call: CleanCall) -> dict:
    """A hidden case as a SWE-smith row carries it (envs/tasks/loaders/swesmith.py): the receiver's
    fields only for a method call."""
    raised = call.outcome[len(RAISES):] if call.outcome.startswith(RAISES) else ""
    entry = {"module": module, "function": function, "args_json": call.args_json,
             "expected_json": "null" if raised else call.outcome}
    if raised:
        entry["raises"] = raised
    if call.init_json:
        entry.update(init_json=call.init_json, steps_json=call.steps_json)
    return entry


class CallRecorder:
    """Sets up the recording run of the clean suite in `workdir`, watching `files` (relative
    paths), and turns its recording into a CallBook. `scratch` is a private folder outside
    workdir (the plugin, its settings and the recording live there)."""

    def __init__(self, scratch: Path, workdir: Path, files: Sequence[str]):
        self.scratch, self.workdir = scratch, workdir
        scratch.mkdir(parents=True, exist_ok=True)
        (scratch / f"{PLUGIN_NAME}.py").write_text(PLUGIN_SOURCE)
        (scratch / "swerve_recorder_values.py").write_text(VALUES_SOURCE)
        self.out = scratch / "recording.json"
        self.config = scratch / "recorder.json"
        root = os.path.realpath(workdir)
        self.config.write_text(json.dumps({
            "files": {os.path.join(root, *rel.split("/")): module_name(rel) for rel in files},
            "max_calls_per_function": MAX_CALLS_PER_FUNCTION, "max_seen_per_function": MAX_SEEN_PER_FUNCTION,
            "max_call_chars": MAX_CALL_CHARS, "max_steps": MAX_STEPS, "out": str(self.out),
        }))

    @property
    def pytest_args(self) -> List[str]:
        return ["-p", PLUGIN_NAME]

    @property
    def env(self) -> Dict[str, str]:
        return {CONFIG_ENV: str(self.config)}

    @property
    def paths(self) -> List[str]:
        return [str(self.scratch)]

    def recording(self) -> Optional[list]:
        """[[module, function, args_json, result_json, init_json, steps_json], ...], or None when
        the run wrote none."""
        if not self.out.is_file():
            return None
        return json.loads(self.out.read_text())

    def book(self, python: str, timeout_s: float) -> CallBook:
        """The recorded calls whose clean replay returns the recorded value."""
        recorded = [(module, function, CleanCall(args, result, init, steps))
                    for module, function, args, result, init, steps in self.recording() or []]
        outcomes = replay(self.workdir, recorded, python, timeout_s) if recorded else []
        book = CallBook()
        for (module, function, call), value in zip(recorded, outcomes or []):
            if value is not None and value == _clean_outcome(call.outcome, value):
                book.calls.setdefault((module, function), []).append(
                    CleanCall(call.args_json, value, call.init_json, call.steps_json))
        return book


def replay(workdir: Path, calls: Sequence[Call], python: str, timeout_s: float) -> Optional[List[Optional[str]]]:
    """Each call's canonical JSON value in workdir (None: it raised or returned no plain value),
    from the grader's runner in one fresh `python -I -B` (-B: a mutated file written within the
    same second as a cached clean one must not reuse its bytecode); None when the runner did not
    finish within timeout_s."""
    with tempfile.TemporaryDirectory(prefix="swerve-replay-") as scratch:
        runner, cases, results = (Path(scratch) / name for name in ("runner.py", "cases.json", "results.json"))
        runner.write_text(RUNNER_SOURCE)
        cases.write_text(json.dumps([_runner_entry(*call) for call in calls]))
        if not _run_runner([python, "-I", "-B", str(runner), str(cases), str(results)], workdir, timeout_s):
            return None
        if not results.is_file():
            return None
        return [_value(entry) for entry in json.loads(results.read_text())]


def _runner_entry(module: str, function: str, call: CleanCall) -> list:
    # As the grader tells its runner: the expected value is never part of it.
    return runner_entry(HiddenCase(module, function, call.args_json, "", call.init_json, call.steps_json))


def _clean_outcome(recorded: str, replayed: str) -> str:
    """What the clean replay must give for a recorded call: its value, or, when it raised in the
    tests (which class the recorder cannot see), any exception the runner can name."""
    if recorded == RAISED:
        return replayed if replayed.startswith(RAISES) else RAISED
    return canonical(recorded)


def _value(entry: dict) -> Optional[str]:
    """A call's outcome: canonical JSON of its value, RAISES + the class it raised, or None when
    the runner cannot vouch for either (an unplain value, an exception it cannot name)."""
    if "error" in entry or "value" not in entry:
        return None
    if "raised" in entry:
        return RAISES + entry["raised"]
    return canonical(entry["value"])


def _run_runner(command: List[str], workdir: Path, timeout_s: float) -> bool:
    """Whether the runner finished in time; its process group is killed either way (a mutated
    function may have started children)."""
    proc = subprocess.Popen(command, cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        proc.wait(timeout=max(1.0, timeout_s))
        return True
    except subprocess.TimeoutExpired:
        return False
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # the group already exited: nothing is left to kill
        proc.wait()


def default_python(python: Optional[str]) -> str:
    return python or sys.executable
