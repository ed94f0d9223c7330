"""Hidden cases (envs/tasks/hidden_cases.py, envs/tasks/hidden_runner.py): the runner accepts only plain
JSON values, calls methods on receivers built from plain values, names a raised class only when
the name leads back to it; the host compares exact classes and attributes."""
import json

import pytest

from envs.tasks.builtin.hidden import run_calls
from envs.tasks.hidden_cases import PASSED as CASE_PASSED
from envs.tasks.hidden_cases import compare
from envs.tasks.task import HiddenCase


def _calls(module, *names, **fields):
    return [HiddenCase(module, name, "[]", "", **fields) for name in names]


def test_runner_rejects_values_that_are_not_plain_json(tmp_path):
    (tmp_path / "values.py").write_text(
        "class Always(int):\n"
        "    def __eq__(self, other):\n"
        "        return True\n"
        "def tup(): return (1, [2, (3,)])\n"
        "def always(): return Always(1)\n"
        "def nan(): return float('nan')\n"
        "def int_keys(): return {1: 'a'}\n"
        "def tagged(): return {'__tuple__': [1, 2]}\n"
        "def flag(): return True\n"
        "def one(): return 1\n"
        "def noisy():\n"
        "    print('noise on stdout')\n"
        "    return [1.5, None, {'k': 'v'}]\n"
        "def boom(): raise KeyError('x')\n"
    )
    names = ["tup", "always", "nan", "int_keys", "tagged", "flag", "one", "noisy", "boom"]
    outcomes = dict(zip(names, run_calls(tmp_path, _calls("values", *names))))
    for name, why in (("always", "not a plain JSON value: Always"), ("nan", "not a plain JSON value: non-finite float"),
                      ("int_keys", "a dict key is not a str")):
        assert outcomes[name] == {"error": f"TypeError: {why}"}, outcomes[name]
    # A tuple is tagged, unlike a list; a dict that looks like a tagged tuple is not a value.
    assert outcomes["tup"] == {"value": '{"__tuple__": [1, [2, {"__tuple__": [3]}]]}'}
    assert "reserved for tuples" in outcomes["tagged"]["error"]
    assert outcomes["flag"] == {"value": "true"} and outcomes["one"] == {"value": "1"}
    assert outcomes["noisy"] == {"value": '[1.5, null, {"k": "v"}]'}
    assert outcomes["boom"] == {"raised": "builtins.KeyError", "value": "null"}


def test_runner_calls_methods_on_a_receiver_built_from_plain_values(tmp_path):
    (tmp_path / "shapes.py").write_text(
        "class Box:\n"
        "    def __init__(self, *items):\n"
        "        self.items = list(items)\n"
        "    def put(self, item):\n"
        "        self.items.append(item)\n"
        "    def total(self):\n"
        "        return sum(self.items)\n"
        "    def merged(self, other):\n"
        "        return Box(*self.items, *other.items)\n"
        "    @classmethod\n"
        "    def of(cls, n):\n"
        "        return cls(*range(n))\n"
        "    def split(self):\n"
        "        return [Box(item) for item in self.items]\n"
    )
    cases = [
        HiddenCase("shapes", "Box.total", "[]", "", init_json="[1, 2]", steps_json='[["put", [4]], ["put", [8]]]'),
        HiddenCase("shapes", "Box.merged", '[{"new": "Box", "args": [3]}]', "", init_json="[1]", result_attrs=("items",), objects=True),
        HiddenCase("shapes", "Box.of", "[3]", "", result_attrs=("items",)),
        HiddenCase("shapes", "Box.split", "[]", "", init_json="[5, 6]", result_attrs=("items",)),
        # Without `objects`, a dict shaped like a constructor is a plain argument.
        HiddenCase("shapes", "Box.total", "[]", "", init_json='[{"new": "Box", "args": []}]'),
        HiddenCase("shapes", "Box.merged", "[]", "", init_json="[]", result_attrs=("items",)),
    ]
    outcomes = run_calls(tmp_path, cases)
    assert outcomes[:4] == [{"value": "15"}, {"value": '{"items": [1, 3]}'}, {"value": '{"items": [0, 1, 2]}'},
                            {"value": '[{"items": [5]}, {"items": [6]}]'}]
    assert outcomes[4] == {"raised": "builtins.TypeError", "value": "null"}
    assert outcomes[5]["raised"] == "builtins.TypeError"


def test_runner_names_a_raised_class_only_when_the_name_leads_back_to_it(tmp_path):
    (tmp_path / "errs.py").write_text(
        "import builtins\n"
        "class Bad(Exception):\n"
        "    def __init__(self, line):\n"
        "        self.line = line\n"
        "class ValueError(Exception):\n"
        "    __module__ = 'builtins'\n"
        "class Impostor(Exception):\n"
        "    pass\n"
        "def own(): raise Bad(3)\n"
        "def builtin(): raise builtins.ValueError('x')\n"
        "def disguised(): raise ValueError('x')\n"
        "def rebound():\n"
        "    builtins.KeyError = Impostor\n"
        "    raise Impostor('x')\n"
        "def local():\n"
        "    class Hidden(Exception):\n"
        "        pass\n"
        "    raise Hidden()\n"
    )
    names = ["own", "builtin", "disguised", "rebound", "local"]
    outcomes = dict(zip(names, run_calls(tmp_path, _calls("errs", *names))))
    assert outcomes["own"] == {"raised": "errs.Bad", "value": "null"}
    assert outcomes["builtin"] == {"raised": "builtins.ValueError", "value": "null"}
    # Named builtins.ValueError by its own __module__, but not that class: an error, not a raise.
    assert "raised" not in outcomes["disguised"] and "does not name" in outcomes["disguised"]["error"]
    assert outcomes["rebound"] == {"raised": "errs.Impostor", "value": "null"}
    assert "raised" not in outcomes["local"] and "error" in outcomes["local"]
    with_attrs = run_calls(tmp_path, _calls("errs", "own", result_attrs=("line",)) + _calls("errs", "builtin", result_attrs=("line",)))
    assert with_attrs[0] == {"raised": "errs.Bad", "value": '{"line": 3}'}
    assert with_attrs[1]["raised"] == "builtins.ValueError" and "no attribute 'line'" in with_attrs[1]["error"]


def test_compare_needs_the_exact_raised_class_and_its_attributes():
    raises = HiddenCase("m", "f", "[]", '{"line": 3}', result_attrs=("line",), raises="m.Bad")
    returns = HiddenCase("m", "f", "[]", "null")
    results = [{"raised": "m.Bad", "value": '{"line": 3}'}, {"raised": "m.Bad", "value": "null"}]
    assert compare([raises, returns], json.dumps(results)) == {
        "hidden#0 m:f": CASE_PASSED, "hidden#1 m:f": "FAILED (raised m.Bad, expected a value)"}
    for result, why in [({"raised": "m.Bad", "value": '{"line": 4}'}, "wrong value"),
                        ({"raised": "builtins.ValueError", "value": '{"line": 3}'}, "raised builtins.ValueError, expected m.Bad"),
                        ({"value": '{"line": 3}'}, "returned, expected m.Bad raised"),
                        ({"raised": "m.Bad", "error": "AttributeError: no line"}, "AttributeError: no line")]:
        assert compare([raises], json.dumps([result])) == {"hidden#0 m:f": f"FAILED ({why})"}


@pytest.mark.parametrize("results_json, why", [
    ("[" * 100_000 + "]" * 100_000, "the runner's results are malformed: nested deeper than 3 levels"),
    ("[" + "9" * 5000 + "]", "the runner's results are malformed: an integer of 5000 digits, more than 1000"),
    ('[{"value": "1"}, {"value": "2"}]', "no results from the runner"),
    ("{not json", "the runner's results are malformed: not JSON"),
])
def test_results_the_agents_code_rewrote_fail_every_case_with_the_reason(results_json, why):
    verdicts = compare([HiddenCase("m", "f", "[]", "1")], results_json)
    assert list(verdicts) == ["hidden#0 m:f"] and verdicts["hidden#0 m:f"].startswith(f"FAILED ({why}"), verdicts


@pytest.mark.parametrize("value, why", [
    ("[" * 100_000 + "]" * 100_000, "malformed value: nested deeper than 200 levels"),
    ("9" * 5000, "malformed value: an integer of 5000 digits, more than 4300"),
    ("{", "malformed value: not JSON"),
    ("[[[1]]]", "wrong value"),
])
def test_a_hostile_value_fails_its_case_never_raises(value, why):
    cases = [HiddenCase("m", "f", "[]", "1")]
    assert compare(cases, json.dumps([{"value": value}]))["hidden#0 m:f"].startswith(f"FAILED ({why}")
    assert compare(cases, json.dumps([{"value": "1"}])) == {"hidden#0 m:f": CASE_PASSED}
