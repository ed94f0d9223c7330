"""Hidden cases, host side: what the sandbox is given to run, and the comparison it never sees.

The sandbox runs envs/tasks/hidden_runner.py on [module, function, args(, spec)] entries and
returns each call's value, or the class it raised, as JSON text; the expected values stay here.
Values compare as canonical JSON (sorted keys), so `true` is not `1` and a float must match
exactly after its JSON round trip; a raised class compares by its exact "module.qualname".
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Optional, Sequence

from envs.tasks.hostile_json import HostileJSONError, load_bounded
from envs.tasks.task import HiddenCase

RUNNER_SOURCE = (Path(__file__).resolve().parent / "hidden_runner.py").read_text()
PASSED, FAILED = "PASSED", "FAILED"
# The results are the runner's, but the agent's code runs in that process and can rewrite them:
# they are parsed as hostile input. The list of {value: JSON text} is 2 deep; a value may nest as
# deep as a real return value does, and hold any int Python itself would parse.
MAX_RESULTS_BYTES = 16 << 20
RESULTS_MAX_DEPTH = 3
VALUE_MAX_DEPTH = 200
VALUE_MAX_INT_DIGITS = 4300


def case_label(index: int, case: HiddenCase) -> str:
    return f"hidden#{index} {case.module}:{case.function}"


def runner_entry(case: HiddenCase) -> list:
    """What the runner is told about one case; a plain function call stays a triple."""
    spec: dict = {}
    if case.init_json:
        spec["init"] = json.loads(case.init_json)
        spec["steps"] = json.loads(case.steps_json) if case.steps_json else []
    if case.result_attrs:
        spec["attrs"] = list(case.result_attrs)
    if case.objects:
        spec["objects"] = True
    return [case.module, case.function, json.loads(case.args_json)] + ([spec] if spec else [])


def runner_input(cases: Sequence[HiddenCase]) -> str:
    """The runner's CASES file: calls only, no expected value."""
    return json.dumps([runner_entry(case) for case in cases])


def canonical(json_text: str) -> str:
    return json.dumps(json.loads(json_text), sort_keys=True)


def compare(cases: Sequence[HiddenCase], results_json: Optional[str]) -> Dict[str, str]:
    """Label -> PASSED, or FAILED with why, for every case. Results that are missing, not a list
    of one entry per case, or not what the runner writes fail every case they cannot vouch for."""
    why = "no results from the runner"
    try:
        results = load_bounded(results_json, MAX_RESULTS_BYTES, RESULTS_MAX_DEPTH) if results_json else None
    except HostileJSONError as error:
        results, why = None, f"the runner's results are malformed: {error}"[:300]
    if not isinstance(results, list) or len(results) != len(cases):
        return {case_label(i, case): f"{FAILED} ({why})" for i, case in enumerate(cases)}
    return {case_label(index, case): _verdict(case, result) for index, (case, result) in enumerate(zip(cases, results))}


def _verdict(case: HiddenCase, result: object) -> str:
    if not isinstance(result, dict):
        return f"{FAILED} (malformed result)"
    raised = result.get("raised", "")
    if raised and raised != case.raises:
        return f"{FAILED} (raised {str(raised)[:200]}, expected {case.raises or 'a value'})"
    if not isinstance(result.get("value"), str):
        return f"{FAILED} ({result.get('error') or 'malformed result'})"
    if raised != case.raises:
        return f"{FAILED} (returned, expected {case.raises} raised)"
    try:
        value = load_bounded(result["value"], MAX_RESULTS_BYTES, VALUE_MAX_DEPTH, VALUE_MAX_INT_DIGITS)
    except HostileJSONError as error:
        return f"{FAILED} (malformed value: {str(error)[:200]})"
    same = json.dumps(value, sort_keys=True) == canonical(case.expected_json)
    return PASSED if same else f"{FAILED} (wrong value)"
