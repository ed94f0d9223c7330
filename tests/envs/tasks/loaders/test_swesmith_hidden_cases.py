"""SWE-smith rows' hidden cases (envs/tasks/loaders/swesmith.py): the method, attribute and exception
fields travel in a row and come back as the same HiddenCase; malformed ones refuse the row."""
import json
from dataclasses import asdict, replace

import pytest

from envs.tasks.loaders import load_task_set
from envs.tasks.loaders.swesmith import hidden_cases
from envs.tasks.task import HiddenCase
from tests.envs.tasks.test_loaders import make_repo, swesmith_row, write_jsonl

METHOD_CASE = {"module": "calc.ops", "function": "Tally.add", "args_json": "[2]", "expected_json": "{\"n\": 3}",
               "init_json": "[1]", "steps_json": "[[\"add\", [0]]]", "result_attrs": ["n"], "objects": True,
               "raises": "calc.ops.Overflow"}


def row_entry(case: HiddenCase) -> dict:
    """A case as `swerve tasks synth` writes it: the four call fields and only the optional ones set."""
    entry = {key: value for key, value in asdict(case).items() if value}
    entry.update(args_json=case.args_json, expected_json=case.expected_json)
    if case.result_attrs:
        entry["result_attrs"] = list(case.result_attrs)
    return entry


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SWERVE_CACHE_DIR", str(tmp_path / "cache"))


def test_method_attribute_and_exception_fields_round_trip(tmp_path):
    repo = make_repo(tmp_path / "repo")
    static = {"module": "calc.ops", "function": "Tally.parse", "args_json": "[\"3\"]", "expected_json": "3"}
    rows = write_jsonl(tmp_path / "rows.jsonl", [
        swesmith_row("calc-1", repo, hidden_cases=[METHOD_CASE, static]),
        swesmith_row("calc-2", repo, hidden_cases=json.dumps([METHOD_CASE])),
    ])
    task_set = load_task_set(str(rows))
    assert task_set.skipped == []
    method = HiddenCase("calc.ops", "Tally.add", "[2]", "{\"n\": 3}", "[1]", "[[\"add\", [0]]]", ("n",), True,
                        "calc.ops.Overflow")
    by_id = {task.id: task for task in task_set.tasks}
    assert by_id["calc-1"].hidden_cases == (method, HiddenCase("calc.ops", "Tally.parse", "[\"3\"]", "3"))
    assert by_id["calc-2"].hidden_cases == (method,)
    assert row_entry(method) == METHOD_CASE


def test_every_built_in_hidden_call_travels_in_a_row():
    """The built-in suite's calls (methods, steps, objects, raises) as rows would carry them."""
    from envs.tasks.builtin.suite import TASKS_FILE, hidden_calls

    # Expected outcomes are computed at load time; any JSON stands in for them here.
    calls = [replace(case, expected_json="null")
             for row in json.loads(TASKS_FILE.read_text())["tasks"] for case in hidden_calls(row)]
    assert any(case.init_json for case in calls) and any(case.steps_json for case in calls)
    assert hidden_cases({"hidden_cases": [row_entry(case) for case in calls]}) == tuple(calls)


BAD = {
    "unknown-key": (dict(METHOD_CASE, shown="yes"), "expected an object with the keys"),
    "init-not-list": (dict(METHOD_CASE, init_json="{}"), "init_json must be a JSON list, got dict"),
    "init-not-json": (dict(METHOD_CASE, init_json="[1"), "init_json is not JSON"),
    "init-not-string": (dict(METHOD_CASE, init_json=[1]), "every value but result_attrs and objects must be a string"),
    "init-on-function": (dict(METHOD_CASE, function="add"), "init_json needs function to be Class.method"),
    "steps-without-init": ({k: v for k, v in METHOD_CASE.items() if k != "init_json"},
                           "steps_json needs a receiver (init_json)"),
    "step-shape": (dict(METHOD_CASE, steps_json="[[\"add\"]]"), "steps_json entries must be [method name, args list]"),
    "step-name": (dict(METHOD_CASE, steps_json="[[\"a.b\", []]]"), "steps_json entries must be"),
    "attrs-not-list": (dict(METHOD_CASE, result_attrs="n"), "result_attrs must be a list of attribute names"),
    "attrs-not-names": (dict(METHOD_CASE, result_attrs=["n()"]), "result_attrs must be a list of attribute names"),
    "objects-not-bool": (dict(METHOD_CASE, objects="yes"), "objects must be true or false, got str"),
    "raises-unqualified": (dict(METHOD_CASE, raises="Overflow"), "is not a module.qualname"),
    "bad-function": (dict(METHOD_CASE, function="Tally..add"), "is not a dotted name of identifiers"),
}


def test_malformed_optional_fields_refuse_the_row_with_the_reason(tmp_path):
    repo = make_repo(tmp_path / "repo")
    rows = write_jsonl(tmp_path / "rows.jsonl", [swesmith_row("good", repo, hidden_cases=[METHOD_CASE])] + [
        swesmith_row(f"bad-{name}", repo, hidden_cases=[entry]) for name, (entry, _) in BAD.items()])
    task_set = load_task_set(str(rows))
    assert [task.id for task in task_set.tasks] == ["good"]
    reasons = {s.row.split(" ")[1]: s.reason for s in task_set.skipped if s.field == "hidden_cases"}
    assert sorted(reasons) == sorted(f"(bad-{name})" for name in BAD)
    for name, (_, reason) in BAD.items():
        assert reasons[f"(bad-{name})"].startswith("entry 0: ") and reason in reasons[f"(bad-{name})"], name
