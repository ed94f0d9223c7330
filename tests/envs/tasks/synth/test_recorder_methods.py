"""Method calls as hidden cases (envs/tasks/synth/recorder_plugin.py, call_recorder.py): a receiver is
rebuilt from its constructor's plain arguments and the method calls made on it since, and only
while its state is what they made."""
import json
import sys
import textwrap

import pytest

from configs.schema import SynthConfig
from envs.tasks.synth.call_recorder import MAX_STEPS, RAISED, RAISES, CallRecorder
from envs.tasks.synth.injector import candidate_files, synthesize
from envs.tasks.synth.pytest_run import run_pytest
from tests.envs.tasks.synth.class_fixture_repo import make_class_fixture_repo

MODULE = textwrap.dedent('''\
    class Tally:
        UNIT = 1

        def __init__(self, start):
            self.n = start

        def add(self, k):
            self.n += k
            return self.n

        def peek(self):
            return self.n

        def add_twice(self, k):
            self.add(k)
            return self.add(k)

        @staticmethod
        def parse(text):
            return int(text)

        @classmethod
        def unit(cls):
            return cls.UNIT


    class Big(Tally):
        def peek(self):
            return -self.n


    class Slotted:
        __slots__ = ("xs",)

        def __init__(self, xs):
            self.xs = list(xs)

        def last(self):
            return self.xs[-1]


    class Bare:
        def hello(self, name):
            return "hi " + name


    class Holder:
        def __init__(self, thing):
            self.thing = thing

        def get(self):
            return 1


    _NOTHING = object()


    class Opt:
        def __init__(self, a, extra=_NOTHING):
            self.a = a if extra is _NOTHING else extra

        def get(self, plus=0):
            return self.a + plus


    def pick(x, table=_NOTHING):
        return x
''')

TESTS = textwrap.dedent('''\
    from pkg.things import Bare, Big, Holder, Opt, Slotted, Tally, pick


    def test_methods():
        tally = Tally(1)
        assert tally.add(2) == 3 and tally.peek() == 3
        tally.n = 10  # behind the steps' back: this receiver is no longer rebuilt
        assert tally.peek() == 10
        assert Tally.parse("4") == 4 and Tally.unit() == 1
        assert Big(5).peek() == -5 and Big(6).add(1) == 7
        assert Slotted([1, 2]).last() == 2
        assert Bare().hello("a") == "hi a"
        bare = Bare()
        bare.x = 1
        assert bare.hello("b") == "hi b"
        assert Holder(object()).get() == 1
        assert Tally(100).add_twice(1) == 102
        many = Tally(0)
        assert [many.add(1) for _ in range(7)] == [1, 2, 3, 4, 5, 6, 7]
        assert Opt(3).get() == 3 and Opt(3, 4).get(1) == 5 and pick(2) == 2
        try:
            Slotted([]).last()
        except IndexError:
            pass
''')


def test_the_recorder_rebuilds_receivers_from_their_constructor_and_steps(tmp_path):
    repo = tmp_path / "rec"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "things.py").write_text(MODULE)
    (repo / "tests" / "test_things.py").write_text(TESTS)
    recorder = CallRecorder(tmp_path / "scratch", repo, candidate_files(repo))
    run = run_pytest(repo, 120, extra_args=recorder.pytest_args, extra_env=recorder.env, extra_paths=recorder.paths)
    assert run.passed == {"tests/test_things.py::test_methods"}, run.output[-2000:]
    recorded = {}
    for module, function, args_json, result_json, init_json, steps_json in recorder.recording():
        assert module == "pkg.things"
        recorded.setdefault(function, []).append((init_json, steps_json, args_json, result_json))
    # Holder's argument is not plain, `bare` had an attribute set on it, Big.add is Tally.add
    # reached through a subclass (Tally(6) would not rebuild a Big): none of them is recorded.
    assert set(recorded) == {"Tally.add", "Tally.peek", "Tally.add_twice", "Tally.parse", "Tally.unit",
                             "Big.peek", "Slotted.last", "Bare.hello", "Opt.get", "pick"}
    # Trailing parameters left at a default that is no plain value are left out of the call.
    assert recorded["Opt.get"] == [("[3]", "[]", "[]", "3"), ("[3, 4]", "[]", "[1]", "5")]
    assert recorded["pick"] == [("", "", "[2]", "2")]
    assert recorded["Tally.parse"] == [("", "", '["4"]', "4")]
    assert recorded["Tally.unit"] == [("", "", "[]", "1")]
    assert recorded["Big.peek"] == [("[5]", "[]", "[]", "-5")]
    assert recorded["Slotted.last"] == [("[[1, 2]]", "[]", "[]", "2"), ("[[]]", "[]", "[]", RAISED)]
    assert recorded["Bare.hello"] == [("[]", "[]", '["a"]', '"hi a"')]
    # The peek after `tally.n = 10` is not there; the one after add(2) carries add(2) as a step.
    assert recorded["Tally.peek"] == [("[1]", '[["add", [2]]]', "[]", "3")]
    # A call made inside another sees the steps before the outer one: add_twice's own adds.
    adds = recorded["Tally.add"]
    assert ("[100]", "[]", "[1]", "101") in adds and ("[100]", "[]", "[1]", "102") not in adds
    # The receiver made by Tally(0) is followed for MAX_STEPS steps, then no more.
    many = [steps for init, steps, _, _ in adds if init == "[0]"]
    assert [len(json.loads(steps)) for steps in many] == list(range(MAX_STEPS + 1))
    # Replayed by the grader's runner on the clean copy, every one of them returns its value.
    book = recorder.book(sys.executable, 60)
    assert book.count() == sum(len(calls) for calls in recorded.values())
    assert book.calls[("pkg.things", "Slotted.last")][1].outcome == RAISES + "builtins.IndexError"
    module_calls = book.calls_for("pkg/things.py", "Tally.add_twice")
    assert {function for _, function, _ in module_calls} == {"Tally.add_twice"}
    # Inside a method nothing called directly (the constructor): the class's other method calls.
    init_calls = book.calls_for("pkg/things.py", "Tally.__init__")
    assert {function for _, function, _ in init_calls} == {"Tally.add", "Tally.peek", "Tally.add_twice",
                                                          "Tally.parse", "Tally.unit"}


@pytest.mark.slow
def test_a_mutated_method_is_graded_on_hidden_cases_with_a_receiver(tmp_path, make_sandbox, monkeypatch):
    """Synthesized from a class-based repository, loaded back from its row and graded in a sandbox:
    the bug is in a method, its hidden cases rebuild the receiver; the buggy code fails one of
    them and the gold patch passes all."""
    from envs.grading.grader import grade
    from envs.tasks.loaders import load_tasks
    from envs.tasks.pytest_summary import PASSED

    monkeypatch.setenv("SWERVE_CACHE_DIR", str(tmp_path / "cache"))
    repo = make_class_fixture_repo(tmp_path)
    stats = {}
    rows = synthesize(repo, SynthConfig(num_tasks=6, seed=0, timeout_s=120), stats=stats)
    assert len(rows) == 6 and stats["with_hidden_cases"] == 6, stats
    for row in rows:
        method = row["description"].split("`")[1]
        functions = {case["function"] for case in row["hidden_cases"]}
        assert all(case["module"] == "shop.cart" and "init_json" in case for case in row["hidden_cases"])
        # The mutated method's own calls; in a constructor, the calls of its class's methods.
        if method.endswith(".__init__"):
            assert {function.split(".")[0] for function in functions} == {method.split(".")[0]}, row
        else:
            assert functions == {method}, row
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    tasks = load_tasks(str(tmp_path / "rows.jsonl"))
    with_steps = [task for task in tasks if any(json.loads(case.steps_json) for case in task.hidden_cases)]
    assert with_steps and all(case.init_json for task in tasks for case in task.hidden_cases)
    for task in tasks[:2] + with_steps[:1]:
        sandbox = make_sandbox()
        sandbox.start(task)
        unfixed = grade(sandbox, task, 60)
        assert not unfixed.resolved and any(status != PASSED for status in unfixed.hidden_status.values())
        sandbox.write_files({".gold.patch": task.gold_patch})
        # The fix may keep the file's size within the second it was written: drop cached bytecode.
        assert sandbox.exec("patch -p1 < .gold.patch && rm .gold.patch && rm -rf shop/__pycache__").exit_code == 0
        fixed = grade(sandbox, task, 60)
        assert fixed.resolved, fixed.output
        assert list(fixed.hidden_status.values()) == [PASSED] * len(task.hidden_cases)


def test_a_class_imported_under_another_name_is_found_by_its_file(tmp_path):
    """A src layout: the tests import `pkg.things`, the grader's runner `src.pkg.things`."""
    repo = tmp_path / "srcrepo"
    (repo / "src" / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pytest.ini").write_text("[pytest]\npythonpath = src\n")
    (repo / "src" / "pkg" / "__init__.py").write_text("")
    (repo / "src" / "pkg" / "things.py").write_text(MODULE)
    (repo / "tests" / "test_things.py").write_text(TESTS)
    recorder = CallRecorder(tmp_path / "scratch", repo, candidate_files(repo))
    run = run_pytest(repo, 120, extra_args=recorder.pytest_args, extra_env=recorder.env, extra_paths=recorder.paths)
    assert run.passed == {"tests/test_things.py::test_methods"}, run.output[-2000:]
    book = recorder.book(sys.executable, 60)
    assert ("src.pkg.things", "Tally.peek") in book.calls and ("src.pkg.things", "Slotted.last") in book.calls


@pytest.mark.slow
def test_the_cli_writes_method_cases_that_load_back(tmp_path, capsys, monkeypatch):
    from envs.tasks.loaders import load_tasks
    from envs.tasks.synth import cli

    monkeypatch.setenv("SWERVE_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "rows.jsonl"
    assert cli.main(["--repo", str(make_class_fixture_repo(tmp_path)), "--out", str(out), "-n", "2", "--quiet"]) == 0
    assert "with hidden cases: 2 of 2" in capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    written = [case for row in rows for case in row["hidden_cases"]]
    assert written and all(json.loads(case["init_json"]) for case in written)
    loaded = [case for task in load_tasks(str(out)) for case in task.hidden_cases]
    assert [(case.function, case.init_json, case.steps_json) for case in loaded] == [
        (case["function"], case["init_json"], case["steps_json"]) for case in written]
