"""Check the built-in suite, and fill in the test lists of new tasks.

    python -m envs.tasks.builtin.check           # verify every task; exit 1 and name the broken ones
    python -m envs.tasks.builtin.check --fill    # compute fail_to_pass / pass_to_pass where a row lacks them

A task is sound when its repository's pristine test suite passes, every FAIL_TO_PASS test fails
with the injected line and every PASS_TO_PASS test passes with it. `--fill` lists as
FAIL_TO_PASS every test the bug breaks and as PASS_TO_PASS every other test of the repository.

A row's hidden calls (2 to 4; rows in HIDDEN_EXEMPT have none) must all give their expected values
on the correct repository, and at least one must not on the buggy workspace: the hidden calls
alone detect the bug.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Sequence

from configs.schema import SWEEnvConfig
from envs.tasks.builtin.hidden import Outcome, run_calls
from envs.tasks.builtin.suite import _IGNORED, REPOS_DIR, TASKS_FILE, _inject, expected_values, hidden_calls, suite_hash
from envs.tasks.cache import cache_root
from envs.tasks.pytest_summary import PASSED, PYTEST_COMMAND, suite_status

# The labels tasks.json rows may carry (Task.family): the hand-written suite's own taxonomy of
# bugs. Not the micro generator's template families (envs/tasks/micro.py) nor the synth mutators'
# (envs/tasks/synth/mutators.py): each lists what its own source makes.
FAMILIES = (
    "compare",  # `<` vs `<=`, `>` vs `>=`
    "off_by_one",  # range bound, index, slice end
    "wrong_constant",
    "wrong_return",  # returns the wrong variable
    "swapped_args",  # arguments or operands in the wrong order
    "bool_op",  # `and` vs `or`
    "negation",  # a missing (or extra) `not`
    "wrong_expression",  # anything else
)

# Rows without hidden calls, and why (task id -> reason). Empty: methods are reached through a
# receiver built from plain values (HiddenCase.init_json, steps_json), objects returned or raised
# through their attributes (result_attrs), and a changed exception through its class (raises).
# A bug left here would be one no call with plain inputs and plain, attribute-read outputs can see.
HIDDEN_EXEMPT: Dict[str, str] = {}
HIDDEN_CALLS_PER_TASK = range(2, 5)


def run_tests(workspace: Path, node_ids: Sequence[str] = (),
              timeout_s: float = SWEEnvConfig.grade_timeout_s) -> Dict[str, str]:
    """Run pytest in `workspace` (the whole suite unless node ids are given): node id -> status.
    Graded tasks run the same command, under the same limit (env.swe.grade_timeout_s)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    env.pop("PYTHONPATH", None)
    # PYTEST_COMMAND starts with "python": run it with this interpreter.
    argv = [sys.executable, *PYTEST_COMMAND.split()[1:], *node_ids]
    result = subprocess.run(argv, cwd=workspace, env=env, capture_output=True, text=True, timeout=timeout_s)
    status = suite_status(result.stdout)
    if not status:
        raise RuntimeError(f"no test results in {workspace}:\n{result.stdout}\n{result.stderr}")
    return status


def _copy_repo(repo: str, target: Path) -> Path:
    shutil.copytree(REPOS_DIR / repo, target, ignore=shutil.ignore_patterns(*_IGNORED))
    return target


def pristine_status(repo: str) -> Dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        return run_tests(_copy_repo(repo, Path(tmp) / repo))


@contextmanager
def buggy_workspace(row: dict) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        workspace = _copy_repo(row["repo"], Path(tmp) / row["repo"])
        target = workspace / row["file"]
        target.write_text(_inject(target.read_text(), row["old"], row["new"], f"task {row['id']}"))
        yield workspace


def buggy_status(row: dict) -> Dict[str, str]:
    with buggy_workspace(row) as workspace:
        return run_tests(workspace)


def correct_outcomes(suite: dict) -> Dict[str, List[Outcome]]:
    """task id -> its hidden calls' outcomes on the correct repository, run afresh (not cached);
    one child interpreter per repository."""
    outcomes: Dict[str, List[Outcome]] = {}
    for repo in suite["repos"]:
        rows = [row for row in suite["tasks"] if row["repo"] == repo and row.get("hidden")]
        if not rows:
            continue
        results = iter(run_calls(REPOS_DIR / repo, [case for row in rows for case in hidden_calls(row)]))
        for row in rows:
            outcomes[row["id"]] = [next(results) for _ in row["hidden"]]
    return outcomes


def hidden_problems(row: dict, expected: Sequence[Outcome], correct: Sequence[Outcome],
                    buggy: Sequence[Outcome]) -> List[str]:
    """Why the row's hidden calls are unsound: a wrong count, a correct-repository outcome other
    than the expected one, or no call that the bug changes."""
    calls = [entry["call"] for entry in row.get("hidden", [])]
    if row["id"] in HIDDEN_EXEMPT:
        return [f"exempt from hidden calls ({HIDDEN_EXEMPT[row['id']]}) but has {len(calls)}"] if calls else []
    if len(calls) not in HIDDEN_CALLS_PER_TASK:
        return [f"needs {HIDDEN_CALLS_PER_TASK.start} to {HIDDEN_CALLS_PER_TASK.stop - 1} hidden calls, has {len(calls)}"]
    problems = [
        f"hidden call #{index} {call}: {outcome} on the correct repository, expected {want}"
        for index, (call, want, outcome) in enumerate(zip(calls, expected, correct, strict=True))
        if outcome != want
    ]
    if all(outcome == want for want, outcome in zip(expected, buggy, strict=True)):
        problems.append(f"no hidden call detects the bug: all {len(calls)} give the expected outcome on the buggy workspace")
    return problems


def row_problems(row: dict, pristine: Dict[str, str], buggy: Dict[str, str]) -> List[str]:
    problems = []
    if row.get("family") not in FAMILIES:
        problems.append(f"family {row.get('family')!r} not in {FAMILIES}")
    if not row.get("fail_to_pass") or not row.get("pass_to_pass"):
        problems.append("needs at least one FAIL_TO_PASS and one PASS_TO_PASS test")
    for node_id in row.get("fail_to_pass", []):
        if pristine.get(node_id) != PASSED or buggy.get(node_id) == PASSED:
            problems.append(f"FAIL_TO_PASS {node_id}: {buggy.get(node_id)} with the bug, {pristine.get(node_id)} without")
    for node_id in row.get("pass_to_pass", []):
        if pristine.get(node_id) != PASSED or buggy.get(node_id) != PASSED:
            problems.append(f"PASS_TO_PASS {node_id}: {buggy.get(node_id)} with the bug, {pristine.get(node_id)} without")
    return problems


def dump_suite(suite: dict) -> str:
    """tasks.json in its hand-editable layout: one task field per line, short fields grouped."""
    enc = lambda value: json.dumps(value, ensure_ascii=False)  # noqa: E731
    repos = ",\n".join(f"    {enc(name)}: {enc(meta)}" for name, meta in suite["repos"].items())
    rows = []
    for row in suite["tasks"]:
        head = ", ".join(f"{enc(key)}: {enc(row[key])}" for key in ("id", "repo", "stratum", "family") if key in row)
        rest = [f"      {enc(key)}: {enc(value)}" for key, value in row.items() if key not in ("id", "repo", "stratum", "family")]
        rows.append("    {\n      " + head + ",\n" + ",\n".join(rest) + "\n    }")
    return (
        "{\n"
        f'  "comment": {enc(suite["comment"])},\n'
        f'  "repos": {{\n{repos}\n  }},\n'
        f'  "tasks": [\n' + ",\n".join(rows) + "\n  ]\n}\n"
    )


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fill", action="store_true", help="compute missing fail_to_pass / pass_to_pass lists")
    args = parser.parse_args(argv)
    suite = json.loads(TASKS_FILE.read_text())
    pristine = {repo: pristine_status(repo) for repo in suite["repos"]}
    # What loading gives the grader (cached), against a fresh run on the correct repositories.
    expected = expected_values(suite, cache_root(), suite_hash())
    correct = correct_outcomes(suite)
    failures = 0
    for repo, status in pristine.items():
        broken = sorted(node_id for node_id, word in status.items() if word != PASSED)
        if broken:
            failures += 1
            print(f"{repo}: pristine tests do not pass: {broken}")
    changed = False
    for row in suite["tasks"]:
        with buggy_workspace(row) as workspace:
            buggy = run_tests(workspace)
            buggy_hidden = run_calls(workspace, hidden_calls(row)) if row.get("hidden") else []
        if args.fill and not row.get("fail_to_pass"):
            good = pristine[row["repo"]]
            row["fail_to_pass"] = sorted(n for n in good if good[n] == PASSED and buggy.get(n) != PASSED)
            row["pass_to_pass"] = sorted(n for n in good if good[n] == PASSED and buggy.get(n) == PASSED)
            changed = True
        problems = row_problems(row, pristine[row["repo"]], buggy)
        problems += hidden_problems(row, expected.get(row["id"], []), correct.get(row["id"], []), buggy_hidden)
        failures += bool(problems)
        for problem in problems:
            print(f"{row['id']}: {problem}")
    if changed:
        TASKS_FILE.write_text(dump_suite(suite))
    print(f"{len(suite['tasks'])} tasks, {failures} with problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
