"""The built-in task suite: size, splits, issue texts, and that every task is sound.

Soundness is checked directly and cheaply (one pytest run per task, one per repository):
the bug makes every FAIL_TO_PASS test fail and leaves every PASS_TO_PASS test passing; the
gold patch turns the buggy workspace back into the pristine repository, whose suite passes.
tests/envs/grading/test_grader.py checks the same end to end through a sandbox and the grader.
"""
import filecmp
import json
import re
import shutil
import subprocess
import time
from collections import Counter
from dataclasses import replace

import pytest

from envs.tasks.builtin import suite as builtin_suite
from envs.tasks.builtin.check import FAMILIES, HIDDEN_CALLS_PER_TASK, HIDDEN_EXEMPT, PASSED, hidden_problems, run_tests
from envs.tasks.builtin.hidden import run_calls
from envs.tasks.builtin.suite import _IGNORED, REPOS_DIR, TASKS_FILE, load_builtin
from envs.tasks.hidden_cases import PASSED as CASE_PASSED
from envs.tasks.hidden_cases import compare
from envs.tasks.loaders import load_tasks

SUITE = json.loads(TASKS_FILE.read_text())
ROWS = {row["id"]: row for row in SUITE["tasks"]}
TRAIN = load_tasks(split="train")
EVAL = load_tasks(split="eval")
ALL_TASKS = TRAIN + EVAL
REPOS = sorted(SUITE["repos"])


def _repo_name(task):
    return task.repo.split("/", 1)[1]


def test_suite_size():
    assert len(ALL_TASKS) >= 40
    assert len(ROWS) == len(ALL_TASKS), "every row of tasks.json loads into exactly one split"
    assert len({task.repo for task in ALL_TASKS}) >= 6


def test_splits_are_disjoint_by_repository():
    train_repos = {task.repo for task in TRAIN}
    eval_repos = {task.repo for task in EVAL}
    assert not train_repos & eval_repos
    assert len(eval_repos) >= 2 and len(EVAL) >= 12
    assert len(train_repos) >= 2 and len(TRAIN) > len(EVAL)
    assert not {task.id for task in TRAIN} & {task.id for task in EVAL}


def test_every_task_has_split_and_source():
    for split, tasks in (("train", TRAIN), ("eval", EVAL)):
        for task in tasks:
            assert task.split == split == SUITE["repos"][_repo_name(task)]["split"]
            assert task.source == "builtin"


def test_strata_and_families_are_mixed_across_splits():
    for task in ALL_TASKS:
        assert task.stratum in {"easy", "medium", "hard"}
        assert ROWS[task.id]["family"] in FAMILIES
    core = [family for family in FAMILIES if family != "wrong_expression"]
    for tasks in (TRAIN, EVAL):
        families = Counter(ROWS[task.id]["family"] for task in tasks)
        assert all(families[family] >= 2 for family in core), families
        # No family dominates a split (LEARNING.md: a skewed eval set swings results two-fold).
        assert max(families.values()) <= 0.25 * len(tasks), families
        assert len({task.stratum for task in tasks}) >= 2


def _function_names(row):
    """Names defined or changed around the injected line, to be named by the issue."""
    source = (REPOS_DIR / row["repo"] / row["file"]).read_text().splitlines()
    index = source.index(row["old"])
    for line in reversed(source[: index + 1]):
        match = re.match(r"\s*def (\w+)|(\w+) = ", line)
        if match:
            return {match.group(1) or match.group(2)}
    return set()


@pytest.mark.parametrize("task", ALL_TASKS, ids=[task.id for task in ALL_TASKS])
def test_problem_statement_reads_like_an_issue(task):
    text = task.problem_statement
    title, blank, *body = text.splitlines()
    assert title.strip() and not blank.strip() and body, "a title line, a blank line, then the body"
    assert len(text) > 80 and len(title) < 100
    test_names = {node_id.split("::")[-1] for node_id in task.fail_to_pass + task.pass_to_pass}
    assert not any(name in text for name in test_names), "issue text must not quote test names"
    # The function (or constant) holding the bug is named, e.g. `Money.parse` or `UNIT_SECONDS`.
    names = _function_names(ROWS[task.id])
    assert names and any(name in text for name in names), (names, title)
    assert re.search(r"`[^`]+`", text), "concrete values or calls in backticks"


def _is_plain(value):
    """Plain JSON by exact type: a bool is an int to isinstance, a tuple would dump as a list."""
    kind = type(value)
    if kind is list:
        return all(_is_plain(item) for item in value)
    if kind is dict:
        return all(type(key) is str and _is_plain(item) for key, item in value.items())
    return kind in (int, float, str, bool, type(None))


def test_every_task_has_hidden_cases_or_is_exempt_with_a_reason():
    assert set(HIDDEN_EXEMPT) <= set(ROWS), sorted(set(HIDDEN_EXEMPT) - set(ROWS))
    assert all(reason.strip() for reason in HIDDEN_EXEMPT.values())
    for task in ALL_TASKS:
        if task.id in HIDDEN_EXEMPT:
            assert not task.hidden_cases and "hidden" not in ROWS[task.id], task.id
        else:
            assert len(task.hidden_cases) in HIDDEN_CALLS_PER_TASK, task.id
    # Most of the suite is covered; an exemption is the exception.
    assert len(HIDDEN_EXEMPT) < len(ALL_TASKS) / 2


def test_hidden_cases_are_plain_json_and_canonical():
    for task in ALL_TASKS:
        for case in task.hidden_cases:
            assert type(json.loads(case.args_json)) is list, (task.id, case)
            expected = json.loads(case.expected_json)
            assert _is_plain(expected), (task.id, case)
            # Canonical text: the grader and the self-check compare strings.
            assert case.expected_json == json.dumps(expected, sort_keys=True), (task.id, case)
            assert not case.init_json or type(json.loads(case.init_json)) is list, (task.id, case)
            # A raise is named by its class's module and qualname, as the runner resolves it.
            assert not case.raises or re.fullmatch(r"[\w.]+\.\w+", case.raises), (task.id, case)
            assert case.raises or not case.result_attrs or expected, (task.id, case)
            source = (REPOS_DIR / _repo_name(task) / (case.module.replace(".", "/") + ".py")).read_text()
            assert f"def {case.function.rpartition('.')[2]}(" in source, (task.id, case)


def _render(value, leaf):
    """A hidden call's argument as Python source: {"new": ..., "args": ...} as a constructor call."""
    if isinstance(value, dict) and set(value) == {"new", "args"}:
        return f"{value['new']}({_render_args(value['args'], leaf)})"
    if isinstance(value, list):
        return "[" + _render_args(value, leaf) + "]"
    return leaf(value)


def _render_args(args, leaf):
    return ", ".join(_render(arg, leaf) for arg in args)


def _call_texts(case):
    """How a test would write the call, e.g. `truncate("abc", 2)` or, on a receiver,
    `Money(7, "EUR")` and `allocate([3, 1])`: every part must be in the tests to be a copy."""
    texts = []
    for leaf in (json.dumps, repr):
        method = case.function.rpartition(".")[2]
        parts = [f"{method}({_render_args(json.loads(case.args_json), leaf)})"]
        if case.init_json:
            owner = case.function.rpartition(".")[0]
            parts.append(f"{owner}({_render_args(json.loads(case.init_json), leaf)})")
        texts.append(parts)
    return texts


def test_each_task_has_a_hidden_call_the_visible_tests_do_not_make():
    for task in ALL_TASKS:
        if not task.hidden_cases:
            continue
        visible = "".join(content for path, content in task.test_files if path.endswith(".py"))
        fresh = [case for case in task.hidden_cases
                 if not any(all(part in visible for part in parts) for parts in _call_texts(case))]
        assert fresh, f"{task.id}: every hidden call copies a visible test's call"


def test_a_copied_call_is_recognised():
    """The check above is not vacuous: a visible call, method on a receiver included, is a copy."""
    task = next(task for task in ALL_TASKS if task.id == "moneykit-003")
    visible = "".join(content for path, content in task.test_files if path.endswith(".py"))
    copy = replace(task.hidden_cases[0], args_json="[[1, 1, 1]]", init_json="[100]")
    assert any(all(part in visible for part in parts) for parts in _call_texts(copy))
    assert not any(all(part in visible for part in parts) for parts in _call_texts(task.hidden_cases[0]))


def _hidden_status(task, workspace):
    """Each hidden case's verdict on `workspace`, by the grader's own comparison."""
    return compare(task.hidden_cases, json.dumps(run_calls(workspace, task.hidden_cases)))


# One task per repository that has hidden cases; check.py runs them all.
HIDDEN_SAMPLE = ["textkit-004", "intervals-004", "datekit-003", "moneykit-009", "confparse-002",
                 # A receiver built by steps, objects as arguments and results, a tuple, a raised class.
                 "inventory-004", "intervals-002", "vecmath-006", "moneykit-003", "datekit-004", "confparse-001"]


@pytest.mark.parametrize("task_id", HIDDEN_SAMPLE)
def test_hidden_cases_catch_the_bug_and_pass_after_the_gold_patch(task_id, tmp_path):
    task = next(task for task in ALL_TASKS if task.id == task_id)
    workspace = tmp_path / "workspace"
    shutil.copytree(task.workspace_dir, workspace)
    assert any(status != CASE_PASSED for status in _hidden_status(task, workspace).values())
    (workspace / ".gold.patch").write_text(task.gold_patch)
    result = subprocess.run(["patch", "-p1", "-i", ".gold.patch"], cwd=workspace, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    fixed = _hidden_status(task, workspace)
    assert len(fixed) == len(task.hidden_cases) and all(status == CASE_PASSED for status in fixed.values()), fixed


def test_correct_repository_value_that_is_not_plain_names_the_task_and_call():
    suite = {"repos": {"moneykit": {}}, "tasks": [
        {"id": "moneykit-x", "repo": "moneykit", "hidden": [{"call": "moneykit.money:Money.parse", "args": ["1.00"]}]},
    ]}
    with pytest.raises(ValueError, match=r"task moneykit-x: hidden call moneykit\.money:Money\.parse.*not a plain JSON value: Money"):
        builtin_suite.compute_expected(suite)


@pytest.mark.parametrize("entry, message", [
    ({"call": "moneykit.money:Money.parse", "args": ["1.234"]}, r"raised builtins\.ValueError"),
    ({"call": "moneykit.money:Money.parse", "args": ["1.2"], "attrs": ["cents"], "raises": True}, r"returned .*expects a raise"),
])
def test_correct_repository_must_raise_exactly_where_the_row_says(entry, message):
    suite = {"repos": {"moneykit": {}}, "tasks": [{"id": "moneykit-x", "repo": "moneykit", "hidden": [entry]}]}
    with pytest.raises(ValueError, match=message):
        builtin_suite.compute_expected(suite)


def test_check_flags_hidden_cases_that_miss_the_bug():
    row = ROWS["textkit-003"]
    expected = [{"value": case.expected_json} for case in next(t for t in ALL_TASKS if t.id == row["id"]).hidden_cases]
    same = list(expected)
    assert hidden_problems(row, expected, same, [{"raised": "builtins.ValueError", "value": "null"}] + same[1:]) == []
    assert "no hidden call detects the bug" in " ".join(hidden_problems(row, expected, same, same))
    assert "on the correct repository" in " ".join(hidden_problems(row, expected, [{"value": "0"}] + same[1:], [{"value": "1"}] + same[1:]))


def test_hidden_expected_values_are_cached_with_the_suite_hash(tmp_path, monkeypatch):
    first = load_builtin("eval", cache_dir=str(tmp_path))
    assert len(list((tmp_path / "hidden").glob(f"builtin-{builtin_suite.suite_hash()}-*.json"))) == 1

    def no_runs(*args, **kwargs):
        raise AssertionError("a warm load must not run the hidden calls again")

    monkeypatch.setattr(builtin_suite, "run_calls", no_runs)
    second = load_builtin("eval", cache_dir=str(tmp_path))
    assert [task.hidden_cases for task in second] == [task.hidden_cases for task in first]
    assert any(task.hidden_cases for task in second)


@pytest.mark.parametrize("repo", REPOS)
def test_pristine_repository_passes_quickly(repo, tmp_path):
    workspace = tmp_path / repo
    shutil.copytree(REPOS_DIR / repo, workspace, ignore=shutil.ignore_patterns(*_IGNORED))
    started = time.monotonic()
    status = run_tests(workspace)
    elapsed = time.monotonic() - started
    assert status and all(word == PASSED for word in status.values()), status
    assert (REPOS_DIR / repo / "pytest.ini").is_file() and (REPOS_DIR / repo / "tests").is_dir()
    # Interpreter start included; the tests themselves take milliseconds. Loose for shared CI cores.
    assert elapsed < 10.0
    listed = {node_id for row in SUITE["tasks"] if row["repo"] == repo for node_id in row["fail_to_pass"] + row["pass_to_pass"]}
    assert listed <= set(status), sorted(listed - set(status))


@pytest.mark.parametrize("task", ALL_TASKS, ids=[task.id for task in ALL_TASKS])
def test_bug_breaks_fail_to_pass_and_gold_patch_restores_the_repository(task, tmp_path):
    assert task.fail_to_pass and task.pass_to_pass
    assert not set(task.fail_to_pass) & set(task.pass_to_pass)
    workspace = tmp_path / "workspace"
    shutil.copytree(task.workspace_dir, workspace)
    status = run_tests(workspace, task.fail_to_pass + task.pass_to_pass)
    assert all(status.get(node_id) in {"FAILED", "ERROR"} for node_id in task.fail_to_pass), status
    assert all(status.get(node_id) == PASSED for node_id in task.pass_to_pass), status
    # A single-line edit: the gold patch removes one line and adds one.
    changed = [line for line in task.gold_patch.splitlines()[2:] if line[:1] in "+-"]
    assert len(changed) == 2 and changed[0][0] == "-" and changed[1][0] == "+"
    (workspace / ".gold.patch").write_text(task.gold_patch)
    result = subprocess.run(["patch", "-p1", "-i", ".gold.patch"], cwd=workspace, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    (workspace / ".gold.patch").unlink()
    # After the gold patch the workspace is the pristine repository (whose suite passes, above).
    comparison = filecmp.dircmp(workspace, REPOS_DIR / _repo_name(task), ignore=list(_IGNORED))
    assert _identical(comparison), f"patched workspace differs from {_repo_name(task)}"


def _identical(comparison):
    if comparison.left_only or comparison.right_only or comparison.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(comparison.left, comparison.right, comparison.common_files, shallow=False)
    return not mismatch and not errors and all(_identical(sub) for sub in comparison.subdirs.values())
