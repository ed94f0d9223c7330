import os

import pytest

from envs.tasks.builtin.suite import load_builtin
from envs.tasks.loaders import load_tasks
from envs.tasks.task import Task


def test_suite_size_and_splits():
    train, evaluation = load_tasks(split="train"), load_tasks(split="eval")
    assert len(train) >= 8
    assert len(train) + len(evaluation) >= 12
    assert len({task.repo for task in train + evaluation}) >= 3
    assert all(isinstance(task, Task) for task in train + evaluation)


def test_splits_share_no_repository():
    train_repos = {task.repo for task in load_tasks(split="train")}
    eval_repos = {task.repo for task in load_tasks(split="eval")}
    assert train_repos and eval_repos
    assert not train_repos & eval_repos


def test_order_is_deterministic_and_ids_unique():
    first = [task.id for task in load_tasks()]
    assert first == sorted(first) == [task.id for task in load_tasks()]
    assert len(set(first)) == len(first)


def test_ids_select_a_subset():
    tasks = load_tasks(split="train", ids=["textkit-003", "inventory-001"])
    assert [task.id for task in tasks] == ["inventory-001", "textkit-003"]


def test_unknown_ids_are_named():
    with pytest.raises(ValueError, match="no-such-task"):
        load_tasks(split="train", ids=["textkit-001", "no-such-task"])


def test_unknown_source_names_allowed_sources():
    with pytest.raises(ValueError, match="builtin"):
        load_tasks(source="swe-gym")


def test_unknown_split_is_refused():
    with pytest.raises(ValueError, match="train"):
        load_tasks(split="validation")


def test_task_fields(all_tasks):
    for task in all_tasks:
        assert task.problem_statement.strip() and task.stratum in {"easy", "medium"}
        assert task.fail_to_pass and task.pass_to_pass
        assert not set(task.fail_to_pass) & set(task.pass_to_pass)
        assert task.test_command.startswith("python -m pytest") and "-rA" in task.test_command
        assert task.gold_patch.startswith("--- a/") and "\n+++ b/" in task.gold_patch
        paths = dict(task.test_files)
        for node_id in task.fail_to_pass + task.pass_to_pass:
            assert node_id.split("::")[0] in paths


def test_workspace_holds_the_buggy_line(all_tasks):
    for task in all_tasks:
        relative = task.gold_patch.splitlines()[0][len("--- a/"):]
        removed = [line[1:] for line in task.gold_patch.splitlines() if line.startswith("-") and not line.startswith("---")]
        with open(os.path.join(task.workspace_dir, relative)) as handle:
            assert removed[0] + "\n" in handle.read()


def test_materialization_is_content_addressed_and_leaves_no_staging(tmp_path):
    tasks = load_builtin("eval", cache_dir=str(tmp_path))
    again = load_builtin("eval", cache_dir=str(tmp_path))
    assert [t.workspace_dir for t in tasks] == [t.workspace_dir for t in again]
    (hash_dir,) = (tmp_path / "tasks").iterdir()
    assert sorted(p.name for p in hash_dir.iterdir()) == sorted(t.id for t in tasks)
    for task in tasks:
        assert os.path.isfile(os.path.join(task.workspace_dir, "pytest.ini"))
        assert not any("__pycache__" in dirs for _, dirs, _ in os.walk(task.workspace_dir))


def test_split_all_and_task_split_field():
    everything = load_tasks(split="all")
    assert {task.split for task in everything} == {"train", "eval"}
    assert len(everything) == len(load_tasks(split="train")) + len(load_tasks(split="eval"))


def test_load_task_set_reports_no_skipped_rows_for_builtin():
    from envs.tasks.loaders import load_task_set
    from envs.tasks.task import TaskSet

    task_set = load_task_set("builtin", "train", format="builtin")
    assert isinstance(task_set, TaskSet) and not task_set.skipped
    assert [t.id for t in task_set.tasks] == [t.id for t in load_tasks()]


def test_unknown_format_names_allowed_formats():
    with pytest.raises(ValueError, match="swebench"):
        load_tasks(format="csv")
