"""The call recorder (envs/tasks/synth/call_recorder.py): the plain calls the tests make, recorded and
replayed clean, become a synthesized task's hidden cases, and grading runs them."""
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from configs.schema import SynthConfig
from envs.tasks.synth.injector import synthesize
from envs.tasks.synth.pytest_run import run_pytest
from tests.envs.tasks.synth.fixture_repo import MODULE, make_fixture_repo

RECORDED_MODULE = textwrap.dedent('''\
    import random


    class Flag(int):
        pass


    class Box:
        def size(self, n):
            return n


    def double(x):
        return x * 2


    def pair(x):
        return (x, x)


    def first(xs):
        return xs[0]


    def count_keys(d):
        return len(d)


    def pop_last(xs):
        xs.pop()
        return len(xs)


    def make_flag(x):
        return Flag(x)


    def big(n):
        return "x" * n


    def scaled(x, *, by=2):
        return x * by


    def roll(x):
        return random.random() + x


    def inc(i):
        return i + 1


    def ratio(a, b):
        return a / b
''')

RECORDED_TESTS = textwrap.dedent('''\
    from pkg.util import (Box, big, count_keys, double, first, inc, make_flag, pair, pop_last, ratio, roll,
                          scaled)


    def helper(x):
        return x


    def test_calls():
        assert Box().size(3) == 3
        assert double(helper(4)) == 8
        assert pair(1) == (1, 1)
        assert first([5, 6]) == 5 and first((7, 8)) == 7
        assert count_keys({"a": 1}) == 1 and count_keys({1: 2}) == 1
        assert pop_last([1, 2, 3]) == 2
        assert make_flag(3) == 3
        assert len(big(10)) == 10 and len(big(5000)) == 5000
        assert scaled(2) == 4
        assert roll(0) < 1
        assert [inc(i) for i in range(30)][-1] == 30
        assert ratio(1, 4) == 0.25

    def test_raises():
        try:
            ratio(1, 0)
        except ZeroDivisionError:
            pass
''')


def test_recorder_keeps_plain_calls_of_module_level_functions(tmp_path):
    from envs.tasks.synth.call_recorder import MAX_CALLS_PER_FUNCTION, RAISED, RAISES, CallRecorder, row_entry
    from envs.tasks.synth.injector import candidate_files

    repo = tmp_path / "rec"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "util.py").write_text(RECORDED_MODULE)
    (repo / "tests" / "test_util.py").write_text(RECORDED_TESTS)
    recorder = CallRecorder(tmp_path / "scratch", repo, candidate_files(repo))
    run = run_pytest(repo, 120, extra_args=recorder.pytest_args, extra_env=recorder.env, extra_paths=recorder.paths)
    assert run.passed == {"tests/test_util.py::test_calls", "tests/test_util.py::test_raises"}, run.output[-2000:]
    recorded = {}
    for module, function, args_json, result_json, init_json, steps_json in recorder.recording():
        assert module == "pkg.util" and (init_json, steps_json) == (("[]", "[]") if "." in function else ("", ""))
        recorded.setdefault(function, []).append((args_json, result_json))
    # The tests' own functions, keyword-only signatures, tuples, int keys, subclasses of int and
    # oversized values are left out; arguments are taken before the call changes them. A method
    # comes with its receiver's constructor arguments (test_methods.py).
    assert set(recorded) == {"double", "first", "count_keys", "pop_last", "big", "roll", "inc", "ratio", "Box.size"}
    assert recorded["double"] == [("[4]", "8")]
    assert recorded["first"] == [("[[5, 6]]", "5")]
    assert recorded["count_keys"] == [('[{"a": 1}]', "1")]
    assert recorded["pop_last"] == [("[[1, 2, 3]]", "2")]
    assert recorded["big"] == [("[10]", '"xxxxxxxxxx"')]
    assert recorded["inc"] == [(f"[{i}]", str(i + 1)) for i in range(MAX_CALLS_PER_FUNCTION)]
    # A call that raised is recorded as raising; the clean replay names its class. The call whose
    # value depends on the process (a random number) is dropped by the clean replay.
    assert ("[1, 0]", RAISED) in recorded["ratio"]
    book = recorder.book(sys.executable, 60)
    assert ("pkg.util", "roll") not in book.calls
    assert sorted((c.args_json, c.outcome) for c in book.calls[("pkg.util", "ratio")]) == [
        ("[1, 0]", RAISES + "builtins.ZeroDivisionError"), ("[1, 4]", "0.25")]
    assert row_entry("pkg.util", "ratio", book.calls[("pkg.util", "ratio")][-1]) == {
        "module": "pkg.util", "function": "ratio", "args_json": "[1, 0]", "expected_json": "null",
        "raises": "builtins.ZeroDivisionError"}
    assert book.count() == 8 + MAX_CALLS_PER_FUNCTION


# Not synthesis's runner: each call's canonical JSON value, or the exception it raised.
_REPLAY = """
import importlib, json, sys
sys.path.insert(0, ".")
def value(module, function, args):
    try:
        return json.dumps(getattr(importlib.import_module(module), function)(*args), sort_keys=True)
    except Exception as error:
        return "raised " + type(error).__name__
print(json.dumps([value(*call) for call in json.load(sys.stdin)]))
"""


def _outcomes(workdir: Path, cases: list) -> list:
    calls = [[case["module"], case["function"], json.loads(case["args_json"])] for case in cases]
    done = subprocess.run([sys.executable, "-I", "-B", "-c", _REPLAY], input=json.dumps(calls), cwd=workdir,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@pytest.mark.slow
def test_synthesized_tasks_carry_hidden_cases_with_the_clean_values(tmp_path):
    from envs.tasks.hidden_cases import canonical

    repo = make_fixture_repo(tmp_path)
    stats = {}
    rows = synthesize(repo, SynthConfig(num_tasks=4, seed=0, timeout_s=120), stats=stats)
    assert len(rows) == 4 and stats["with_hidden_cases"] == 4 and stats["no_hidden_cases"] == {}
    for row in rows:
        cases = row["hidden_cases"]
        assert 1 <= len(cases) <= 4 and all(case["module"] == "calc.ops" for case in cases)
        assert row["description"].split("`")[1] == cases[0]["function"]  # the mutated function's calls
        # Run by another runner than synthesis used: the clean repository gives every expected value.
        expected = [canonical(case["expected_json"]) for case in cases]
        assert _outcomes(repo, cases) == expected
        mutated = tmp_path / f"mutated-{row['instance_id']}"
        shutil.copytree(repo, mutated)
        subprocess.run(["patch", "-p1", "-s"], input=row["patch"], text=True, cwd=mutated, check=True)
        assert any(value != want for value, want in zip(_outcomes(mutated, cases), expected))


@pytest.mark.slow
def test_a_synthesized_task_is_graded_on_its_hidden_cases(tmp_path, make_sandbox, monkeypatch):
    """Loaded back from its row and graded in a sandbox: the gold patch passes every hidden case;
    a `minus` whose result equals anything passes the tests but none of the hidden cases."""
    from envs.grading.grader import grade
    from envs.tasks.loaders import load_tasks
    from envs.tasks.pytest_summary import PASSED

    monkeypatch.setenv("SWERVE_CACHE_DIR", str(tmp_path / "cache"))
    repo = make_fixture_repo(tmp_path)
    rows = synthesize(repo, SynthConfig(num_tasks=2, seed=0, timeout_s=60, families=["change_binary_op"]))
    (row,) = [r for r in rows if "+    return a + b" in r["patch"]]  # minus: `a - b` -> `a + b`
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    (task,) = load_tasks(str(tmp_path / "rows.jsonl"))
    assert {(case.module, case.function) for case in task.hidden_cases} == {("calc.ops", "minus")}
    sandbox = make_sandbox()
    sandbox.start(task)
    unfixed = grade(sandbox, task, 60)
    assert not unfixed.resolved and any(status != PASSED for status in unfixed.hidden_status.values())

    sandbox.write_files({".gold.patch": task.gold_patch})
    # The fix keeps the file's size and lands within the second the workspace was written: the
    # bytecode the first grading cached would still look current (pyc checks mtime and size).
    assert sandbox.exec("patch -p1 < .gold.patch && rm .gold.patch && rm -rf calc/__pycache__").exit_code == 0
    fixed = grade(sandbox, task, 60)
    assert fixed.resolved, fixed.output
    assert list(fixed.hidden_status.values()) == [PASSED] * len(task.hidden_cases)

    always_equal = "\n\ndef minus(a, b):\n    return type('S', (int,), {'__eq__': lambda s, o: True})(0)\n"
    sandbox.write_files({"calc/ops.py": MODULE + always_equal})
    fooled = grade(sandbox, task, 60)
    assert set(fooled.test_status.values()) == {PASSED}, fooled.output
    assert not fooled.resolved and all(status.startswith("FAILED") for status in fooled.hidden_status.values())
