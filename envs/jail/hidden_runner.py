"""Runs a task's hidden cases inside the sandbox: `python -I hidden_runner.py CASES RESULTS`.

CASES is a JSON list of [module, function, args]; RESULTS gets one entry per case, in order:
{"value": <plain JSON value>} or {"error": "<why>"}. Expected values never come here: the host
compares (envs/hidden_cases.py), so nothing this process runs can read them, and a value that is
not plain JSON by exact type (a subclass of int whose __eq__ is always true, a tuple, an object)
is an error, not a value. Standard library only.
"""
import importlib
import json
import os
import sys

_MAX_VALUE_CHARS = 65536


def plain(value):
    """The value itself when it is plain JSON by exact type, checked without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if item is None or kind in (bool, int, float, str):
            continue
        if kind is list:
            stack.extend(item)
        elif kind is dict:
            if any(type(key) is not str for key in item):
                raise TypeError("a dict key is not a str")
            stack.extend(item.values())
        else:
            raise TypeError(f"not a plain JSON value: {kind.__name__}")
    return value


def run_case(module, function, args):
    try:
        result = plain(getattr(importlib.import_module(module), function)(*args))
        text = json.dumps(result, sort_keys=True)
    except BaseException as error:  # noqa: B902 - any failure of the tested code is the case's result
        return {"error": f"{type(error).__name__}: {str(error)[:200]}"}
    if len(text) > _MAX_VALUE_CHARS:
        return {"error": f"the value's JSON exceeds {_MAX_VALUE_CHARS} characters"}
    return {"value": text}


def main():
    cases_path, results_path = sys.argv[1], sys.argv[2]
    with open(cases_path, encoding="utf-8") as handle:
        cases = json.load(handle)
    # -I leaves the workspace off the path: the tested modules are imported from it on purpose.
    sys.path.insert(0, os.getcwd())
    results = [run_case(module, function, args) for module, function, args in cases]
    with open(results_path, "w", encoding="utf-8") as handle:
        json.dump(results, handle)


if __name__ == "__main__":
    main()
