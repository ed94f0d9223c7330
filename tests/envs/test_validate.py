import json
from dataclasses import replace

import pytest

from configs.schema import SandboxConfig, SWEEnvConfig, TasksConfig
from envs.tasks.loaders import load_tasks
from envs.tasks.loaders.common import reverse_patch
from envs.validate import (NEEDS_CONTAINER, OK, QUARANTINED, SKIPPED, load_quarantine, quarantine_path,
                           validate_task, write_quarantine)

TIMEOUT_S = 60.0


def _validate_all(tasks, sandbox_factory, timeout_s):
    return [validate_task(task, sandbox_factory, timeout_s, SWEEnvConfig.listing_timeout_s, SandboxConfig()) for task in tasks]
NEW_FILE = "--- /dev/null\n+++ b/NOTES.txt\n@@ -0,0 +1 @@\n+a note that fixes nothing\n"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SWERVE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def two_tasks(task_by_id):
    return [task_by_id["textkit-001"], task_by_id["inventory-001"]]


@pytest.mark.slow
def test_builtin_tasks_pass_the_gate(make_sandbox, two_tasks):
    results = _validate_all(two_tasks, make_sandbox, TIMEOUT_S)
    assert [(r.task_id, r.verdict, r.gold_resolved, r.empty_resolved) for r in results] == [
        ("textkit-001", OK, True, False), ("inventory-001", OK, True, False)]
    assert all(r.seconds > 0 and r.reason == "" for r in results)


@pytest.mark.slow
def test_broken_tasks_are_quarantined_with_a_reason(make_sandbox, two_tasks):
    good = two_tasks[0]
    broken = [
        replace(good, id="no-fix", gold_patch=NEW_FILE),
        replace(good, id="no-apply", gold_patch=reverse_patch(good.gold_patch)),
        replace(good, id="already-passing", fail_to_pass=(), hidden_cases=()),
        replace(good, id="no-gold", gold_patch=""),
    ]
    results = {r.task_id: r for r in _validate_all(broken, make_sandbox, TIMEOUT_S)}
    assert all(r.verdict == QUARANTINED for r in results.values())
    assert results["no-fix"].reason.startswith("gold patch does not resolve")
    assert good.fail_to_pass[0] in results["no-fix"].reason
    assert results["no-fix"].gold_resolved is False and results["no-fix"].empty_resolved is False
    assert results["no-apply"].reason.startswith("gold patch does not apply")
    assert results["already-passing"].reason == "empty patch already resolves the task"
    assert results["no-gold"].reason == "no gold patch to check the task with"


def test_tasks_needing_an_image_are_skipped_not_quarantined(make_sandbox, two_tasks):
    image_task = replace(two_tasks[0], id="in-image", workspace_dir="", image="swebench/sweb.eval.x86_64.a_1776_b-1:latest")
    (result,) = _validate_all([image_task], make_sandbox, TIMEOUT_S)
    assert result.verdict == SKIPPED and NEEDS_CONTAINER in result.reason and result.gold_resolved is None


@pytest.mark.slow
def test_swesmith_local_task_passes_the_gate(tmp_path, make_sandbox):
    repo = tmp_path / "repo"
    (repo / "calc").mkdir(parents=True)
    (repo / "calc" / "__init__.py").write_text("")
    (repo / "calc" / "ops.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_ops.py").write_text(
        "from calc.ops import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_zero():\n    assert add(0, 0) == 0\n")
    bug = "--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a + b\n+    return a - b\n"
    row = {"instance_id": "calc-1", "patch": bug, "repo_path": str(repo), "problem_statement": "add subtracts",
           "FAIL_TO_PASS": ["tests/test_ops.py::test_add"], "PASS_TO_PASS": ["tests/test_ops.py::test_zero"]}
    (tmp_path / "synth.jsonl").write_text(json.dumps(row) + "\n")
    tasks = load_tasks(str(tmp_path / "synth.jsonl"))
    (result,) = _validate_all(tasks, make_sandbox, TIMEOUT_S)
    assert (result.verdict, result.gold_resolved, result.empty_resolved) == (OK, True, False), result.reason


@pytest.mark.slow
def test_quarantine_file_is_merged_written_atomically_and_loaded(tmp_path, make_sandbox, two_tasks):
    cfg = TasksConfig(source="builtin", quarantine_file=str(tmp_path / "q" / "quarantine.json"))
    path = quarantine_path(cfg)
    assert path == tmp_path / "q" / "quarantine.json" and load_quarantine(cfg) == {}
    good = two_tasks[0]
    first = _validate_all([replace(good, gold_patch=NEW_FILE), two_tasks[1]], make_sandbox, TIMEOUT_S)
    write_quarantine(path, "builtin", first)
    data = json.loads(path.read_text())
    assert data["source"] == "builtin" and list(data["tasks"]) == ["textkit-001"]
    assert load_quarantine(cfg) == {"textkit-001": first[0].reason}
    # A later run that finds the task fine removes it; tasks not checked keep their entries.
    write_quarantine(path, "builtin", [replace(first[0], task_id="other", verdict=QUARANTINED)])
    assert set(load_quarantine(cfg)) == {"textkit-001", "other"}
    write_quarantine(path, "builtin", _validate_all([good], make_sandbox, TIMEOUT_S))
    assert set(load_quarantine(cfg)) == {"other"}
    assert [p.name for p in path.parent.iterdir()] == ["quarantine.json"]  # no temporary file left


def test_default_quarantine_location_depends_on_the_source(tmp_path, cache):
    builtin = quarantine_path(TasksConfig())
    other = quarantine_path(TasksConfig(source=str(tmp_path / "rows.jsonl")))
    assert builtin.parent == other.parent == cache / "quarantine"
    assert builtin != other and builtin.suffix == ".json"
    assert quarantine_path(TasksConfig()) == builtin
