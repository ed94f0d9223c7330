import json

import pytest

from actors.cli.main import main

F2P = ["tests/test_ops.py::test_add"]
P2P = ["tests/test_ops.py::test_zero"]
BUG = "--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a + b\n+    return a - b\n"
# Breaks nothing the tests look at: the "empty patch" run already passes, so the gate must refuse it.
HARMLESS = "--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1,2 +1,2 @@\n-def add(a, b):\n+def add(a, b):  # noqa\n     return a + b\n"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SWERVE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def synth_rows(tmp_path, patches):
    repo = tmp_path / "repo"
    (repo / "calc").mkdir(parents=True)
    (repo / "calc" / "__init__.py").write_text("")
    (repo / "calc" / "ops.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_ops.py").write_text(
        "from calc.ops import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_zero():\n    assert add(0, 0) == 0\n")
    path = tmp_path / "synth.jsonl"
    rows = [{"instance_id": name, "repo": "calc", "patch": patch, "repo_path": str(repo), "image_name": "",
             "problem_statement": "add is wrong", "FAIL_TO_PASS": F2P, "PASS_TO_PASS": P2P}
            for name, patch in patches.items()]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + "{broken\n")
    return path


def swebench_rows(tmp_path):
    path = tmp_path / "bench.jsonl"
    row = {"instance_id": "owner__proj-1", "repo": "owner/proj", "base_commit": "abc", "patch": BUG,
           "test_patch": "", "problem_statement": "bug", "hints_text": "", "version": "1",
           "FAIL_TO_PASS": json.dumps(F2P), "PASS_TO_PASS": json.dumps(P2P), "environment_setup_commit": "abc"}
    path.write_text(json.dumps(row) + "\n" + json.dumps({**row, "instance_id": "owner__proj-2", "split": "eval"}) + "\n")
    return path


def test_list_json_with_source_override(tmp_path, capsys):
    path = swebench_rows(tmp_path)
    assert main(["tasks", "list", "--source", str(path), "--split", "all", "--json"]) == 0
    out, err = capsys.readouterr()
    objects = [json.loads(line) for line in out.splitlines()]
    assert [o["id"] for o in objects] == ["owner__proj-1", "owner__proj-2"]
    first = objects[0]
    assert first["repo"] == "owner/proj" and first["split"] == "train" and first["source"] == "swebench"
    assert first["FAIL_TO_PASS"] == F2P and first["PASS_TO_PASS"] == P2P and "stratum" in first
    assert "2 tasks" in err


def test_list_keeps_config_and_overrides(tmp_path, capsys):
    assert main(["tasks", "list", "--config", "tests/smoke.yaml", "tasks.ids=[textkit-001]"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("textkit-001\t") and "1 tasks (builtin, split train)" in out
    assert main(["tasks", "list", f"tasks.source={swebench_rows(tmp_path)}", "tasks.split=eval"]) == 0
    assert capsys.readouterr().out.startswith("owner__proj-2\t")


def test_list_reports_skipped_rows_and_bad_sources(tmp_path, capsys):
    path = synth_rows(tmp_path, {"calc-1": BUG})
    assert main(["tasks", "list", "--source", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "synth.jsonl:2" in err and "'json'" in err and "1 rows skipped" in out
    assert main(["tasks", "list", "--source", str(tmp_path / "nope.jsonl")]) == 2
    assert main(["tasks", "list", "--source", str(path), "--format", "csv"]) == 2


@pytest.mark.slow
def test_validate_builtin_subset_exits_zero(tmp_path, capsys):
    quarantine = tmp_path / "q.json"
    assert main(["tasks", "validate", "tasks.ids=[textkit-001,inventory-001]", f"tasks.quarantine_file={quarantine}"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split("\t") == ["id", "repo", "gold", "empty", "verdict", "reason", "seconds"]
    assert "2 tasks from 2 repos: 2 ok, 0 quarantined, 0 skipped" in out
    assert json.loads(quarantine.read_text()) ["tasks"] == {}


@pytest.mark.slow
def test_validate_quarantines_a_broken_task_and_exits_nonzero(tmp_path, capsys):
    path = synth_rows(tmp_path, {"calc-good": BUG, "calc-harmless": HARMLESS})
    assert main(["tasks", "validate", "--source", str(path)]) == 1
    out = capsys.readouterr().out
    rows = {line.split("\t")[0]: line.split("\t") for line in out.splitlines()}
    assert rows["calc-good"][4] == "ok" and rows["calc-harmless"][4] == "quarantined"
    assert rows["calc-harmless"][5] == "empty patch already resolves the task"
    assert "2 tasks from 1 repos: 1 ok, 1 quarantined, 0 skipped" in out
    (quarantine_file,) = (tmp_path / "cache" / "quarantine").iterdir()
    data = json.loads(quarantine_file.read_text())
    assert data["source"] == str(path) and list(data["tasks"]) == ["calc-harmless"]
    from configs.schema import TasksConfig
    from envs.validate import load_quarantine

    assert list(load_quarantine(TasksConfig(source=str(path)))) == ["calc-harmless"]


def test_validate_reports_image_tasks_as_skipped(tmp_path, capsys):
    path = swebench_rows(tmp_path)
    assert main(["tasks", "validate", "--source", str(path), "--split", "all"]) == 0
    out = capsys.readouterr().out
    assert "needs container backend" in out and "2 tasks from 1 repos: 0 ok, 0 quarantined, 2 skipped" in out
