"""Runs a task's hidden cases: `python -I hidden_runner.py CASES RESULTS`, cwd the workspace.

The sandbox runs it on the agent's workspace, and the built-in suite on its correct repositories
to compute the expected values (envs/tasks/builtin/hidden.py): one code path for both sides.

CASES is a JSON list of [module, function, args] or [module, function, args, spec], spec holding
any of "init" (constructor args: function is "Class.method", called on Class(*init)), "steps"
([method, args] calls on that receiver first), "attrs" (attribute names read from the result, or
from each item of a list result, or from the raised exception) and "objects" (build
{"new": "Class", "args": [...]} in args as module.Class(*args)). RESULTS gets one entry per case,
in order: {"value": <JSON text>} for a return, {"raised": "module.qualname", "value": <JSON of
the exception's attrs, or null>} for an exception; "error": "<why>" instead of "value" (and of
"raised" when the class cannot be named) when it cannot be vouched for.

Expected values never come here: the host compares (envs/tasks/hidden_cases.py), so nothing this
process runs can read them. A value must be plain JSON by exact type (a subclass of int whose
__eq__ is always true, or an object, is an error); an exact tuple is tagged {"__tuple__": [...]}
so it stays unlike a list. A raised class is named only when its name leads back to it, so a
class of the tested code's own calling itself builtins.ValueError is an error. Standard library
only.
"""
import builtins
import functools
import importlib
import json
import math
import os
import sys

_MAX_VALUE_CHARS = 65536
TUPLE_KEY = "__tuple__"
# Taken before any tested code is imported: that code could rebind a name in builtins.
_BUILTINS = dict(vars(builtins))


def plain(value):
    """`value` as plain JSON, tuples tagged; exact types only (isinstance would let a subclass,
    and its own __eq__, through). Recursive: a list holding itself is a RecursionError, an error."""
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float and math.isfinite(value):
        return value
    if kind is list:
        return [plain(item) for item in value]
    if kind is tuple:
        return {TUPLE_KEY: [plain(item) for item in value]}
    if kind is dict:
        if any(type(key) is not str for key in value):
            raise TypeError("a dict key is not a str")
        if TUPLE_KEY in value:
            raise TypeError(f"a dict holds the key {TUPLE_KEY!r}, reserved for tuples")
        return {key: plain(item) for key, item in value.items()}
    raise TypeError(f"not a plain JSON value: {'non-finite float' if kind is float else kind.__name__}")


def resolve(root, path):
    return functools.reduce(getattr, path.split("."), root)


def build(module, value):
    """Plain arguments with each {"new": "Class", "args": [...]} built as module.Class(*args)."""
    if type(value) is list:
        return [build(module, item) for item in value]
    if type(value) is dict and set(value) == {"new", "args"}:
        return resolve(module, value["new"])(*build(module, value["args"]))
    if type(value) is dict:
        return {key: build(module, item) for key, item in value.items()}
    return value


def call(module_name, function, args, spec):
    module = importlib.import_module(module_name)
    built = (lambda value: build(module, value)) if spec.get("objects") else (lambda value: value)
    if "init" not in spec:
        return resolve(module, function)(*built(args))
    owner, _, method = function.rpartition(".")
    receiver = resolve(module, owner)(*built(spec["init"]))
    for name, step_args in spec.get("steps", []):
        getattr(receiver, name)(*built(step_args))
    return getattr(receiver, method)(*built(args))


def class_name(kind):
    """"module.qualname" of a raised class, only when that name resolves to the class itself."""
    module, qualname = kind.__module__, kind.__qualname__
    if type(module) is not str or type(qualname) is not str:
        raise TypeError("a raised class whose module or qualname is not a str")
    found = _BUILTINS.get(qualname) if module == "builtins" else resolve(sys.modules[module], qualname)
    if found is not kind:
        raise TypeError(f"raised a class that {module}.{qualname} does not name")
    return f"{module}.{qualname}"


def read_attrs(obj, attrs):
    if type(obj) is list:
        return [read_attrs(item, attrs) for item in obj]
    return {name: getattr(obj, name) for name in attrs}


def encode(value, attrs):
    text = json.dumps(plain(read_attrs(value, attrs) if attrs else value), sort_keys=True)
    if len(text) > _MAX_VALUE_CHARS:
        raise ValueError(f"the value's JSON exceeds {_MAX_VALUE_CHARS} characters")
    return text


def run_case(module, function, args, spec=None):
    spec = spec or {}
    attrs = spec.get("attrs", [])
    outcome = {}
    try:
        try:
            result = call(module, function, args, spec)
        except BaseException as raised:  # noqa: B902 - what the tested code raises is its outcome
            outcome["raised"] = class_name(type(raised))
            result = raised if attrs else None
        outcome["value"] = encode(result, attrs)
    except BaseException as error:  # noqa: B902 - no vouched-for value: the case fails, not the run
        outcome["error"] = f"{type(error).__name__}: {str(error)[:200]}"
    return outcome


def main():
    cases_path, results_path = sys.argv[1], sys.argv[2]
    with open(cases_path, encoding="utf-8") as handle:
        cases = json.load(handle)
    # -I leaves the workspace off the path: the tested modules are imported from it on purpose.
    sys.path.insert(0, os.getcwd())
    results = [run_case(*case) for case in cases]
    with open(results_path, "w", encoding="utf-8") as handle:
        json.dump(results, handle)


if __name__ == "__main__":
    main()
