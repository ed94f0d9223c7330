import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from envs.tasks.loaders import LOADERS, detect_format
from envs.tasks.loaders.common import ACTIVATE_TESTBED, reverse_patch
from envs.tasks.loaders.swebench import image_name
from envs.tasks.loaders import load_task_set, load_tasks

F2P = ["tests/test_a.py::test_fixed"]
P2P = ["tests/test_a.py::test_other"]


def swebench_row(instance_id, **extra):
    row = {
        "instance_id": instance_id, "repo": "owner/proj", "base_commit": "abc123",
        "patch": "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n", "test_patch": "",
        "problem_statement": f"issue {instance_id}", "hints_text": "", "version": "1.0",
        "FAIL_TO_PASS": json.dumps(F2P), "PASS_TO_PASS": json.dumps(P2P), "environment_setup_commit": "def",
    }
    row.update(extra)
    return row


def write_jsonl(path, rows):
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def make_repo(root: Path) -> Path:
    (root / "calc").mkdir(parents=True)
    (root / "calc" / "__init__.py").write_text("")
    (root / "calc" / "ops.py").write_text("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_ops.py").write_text(
        "from calc.ops import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_sub():\n    assert sub(5, 3) == 2\n")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return root


BUG = "--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a + b\n+    return a - b\n"


def swesmith_row(instance_id, repo_path, patch=BUG, **extra):
    row = {"instance_id": instance_id, "repo": "calc", "patch": patch, "repo_path": str(repo_path),
           "FAIL_TO_PASS": ["tests/test_ops.py::test_add"], "PASS_TO_PASS": ["tests/test_ops.py::test_sub"],
           "problem_statement": "add() subtracts"}
    row.update(extra)
    return row


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SWERVE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_registry_holds_real_functions():
    assert set(LOADERS) == {"builtin", "micro", "swebench", "swesmith", "harbor"}
    assert all(callable(loader) for loader in LOADERS.values())


def test_swebench_jsonl_rows_and_malformed_rows_are_named(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", [
        swebench_row("owner__proj-1"),
        swebench_row("owner__proj-2", FAIL_TO_PASS=F2P, PASS_TO_PASS=[]),  # real lists work too
        {k: v for k, v in swebench_row("owner__proj-3").items() if k != "problem_statement"},
        swebench_row("owner__proj-4", FAIL_TO_PASS="[not json"),
        swebench_row("owner__proj-5", repo=7),
        "{this is not json",
        swebench_row("owner__proj-6", PASS_TO_PASS=[1, 2]),
        swebench_row("owner__proj-1"),
    ])
    task_set = load_task_set(str(path))
    assert [t.id for t in task_set.tasks] == ["owner__proj-1", "owner__proj-2"]
    task = task_set.tasks[0]
    assert task.fail_to_pass == tuple(F2P) and task.pass_to_pass == tuple(P2P)
    assert task.image == "swebench/sweb.eval.x86_64.owner_1776_proj-1:latest"
    assert task.workspace_dir == "" and task.gold_patch.startswith("--- a/x.py") and task.source == "swebench"
    assert task.split == "train" and task.setup == (ACTIVATE_TESTBED,)
    skipped = {(s.row, s.field) for s in task_set.skipped}
    assert skipped == {
        ("rows.jsonl:3 (owner__proj-3)", "problem_statement"),
        ("rows.jsonl:4 (owner__proj-4)", "FAIL_TO_PASS"),
        ("rows.jsonl:5 (owner__proj-5)", "repo"),
        ("rows.jsonl:6", "json"),
        ("rows.jsonl:7 (owner__proj-6)", "PASS_TO_PASS"),
        ("rows.jsonl:8 (owner__proj-1)", "instance_id"),
    }
    reasons = {s.field: s.reason for s in task_set.skipped}
    assert reasons["problem_statement"] == "missing" and "JSON-encoded list" in reasons["FAIL_TO_PASS"]
    assert "expected a string" in reasons["repo"] and "list of strings" in reasons["PASS_TO_PASS"]


def test_load_tasks_logs_one_line_with_the_skipped_count(tmp_path, caplog):
    path = write_jsonl(tmp_path / "rows.jsonl", [swebench_row("a__b-1"), "{bad", swebench_row("a__b-2", repo=None)])
    with caplog.at_level("WARNING"):
        tasks = load_tasks(str(path))
    assert [t.id for t in tasks] == ["a__b-1"]
    (record,) = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert "skipped 2 malformed rows" in record.getMessage()


def test_binary_garbage_and_duplicate_rows_are_skipped_and_named(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(json.dumps(swebench_row("a__b-1")).encode() + b"\n\xff\xfe\x00garbage\x81\n"
                     + json.dumps(swebench_row("a__b-2")).encode() + b"\n" + json.dumps(swebench_row("a__b-1")).encode() + b"\n")
    task_set = load_task_set(str(path))
    assert [t.id for t in task_set.tasks] == ["a__b-1", "a__b-2"]
    garbage, duplicate = task_set.skipped
    assert (garbage.row, garbage.field) == ("rows.jsonl:2", "json") and "invalid UTF-8 at byte 0" in garbage.reason
    assert (duplicate.row, duplicate.field) == ("rows.jsonl:4 (a__b-1)", "instance_id")
    assert "duplicate of rows.jsonl:1" in duplicate.reason and "unique id" in duplicate.reason
    binary_file = tmp_path / "rows.json"
    binary_file.write_bytes(b"\x89PNG\r\n\x1a\n\x00")
    (skipped,) = load_task_set(str(binary_file), format="swebench").skipped
    assert skipped.field == "json" and "not a JSON file: invalid UTF-8" in skipped.reason


def test_a_corrupt_parquet_file_is_skipped_and_the_other_files_load(tmp_path):
    rows = tmp_path / "rows"
    rows.mkdir()
    write_jsonl(rows / "good.jsonl", [swebench_row("a__b-1")])
    (rows / "bad.parquet").write_bytes(b"PAR1\x00garbage")
    task_set = load_task_set(str(rows), format="swebench")
    assert [t.id for t in task_set.tasks] == ["a__b-1"]
    (skipped,) = task_set.skipped
    assert (skipped.row, skipped.field) == ("bad.parquet", "parquet")
    assert "not a readable parquet file" in skipped.reason


def test_split_field_and_all(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", [
        swebench_row("a__b-1"), swebench_row("a__b-2", split="eval"), swebench_row("a__b-3", split="train")])
    assert [t.id for t in load_tasks(str(path))] == ["a__b-1", "a__b-3"]
    assert [t.id for t in load_tasks(str(path), split="eval")] == ["a__b-2"]
    assert [t.id for t in load_tasks(str(path), split="all")] == ["a__b-1", "a__b-2", "a__b-3"]
    with pytest.raises(ValueError, match="splits present"):
        load_tasks(str(path), split="validation")
    assert [t.id for t in load_tasks(str(path), split="all", ids=["a__b-2"])] == ["a__b-2"]


def test_swebench_parquet_with_json_encoded_lists(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed: parquet rows cannot be read")
    import pyarrow.parquet as pq

    rows = [swebench_row("django__django-11099", difficulty="<15 min fix"), swebench_row("a__b-2")]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "test-00000-of-00001.parquet")
    assert detect_format(str(tmp_path / "test-00000-of-00001.parquet")) == "swebench"
    # A directory of row files (a downloaded dataset) loads too.
    tasks = load_tasks(str(tmp_path), split="all")
    assert [t.id for t in tasks] == ["a__b-2", "django__django-11099"]
    assert tasks[1].fail_to_pass == tuple(F2P) and tasks[1].stratum == "<15 min fix"
    assert tasks[1].image == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"


def test_image_name_convention():
    assert image_name("astropy__astropy-12907") == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"


def test_detection_and_explicit_format(tmp_path):
    bench = write_jsonl(tmp_path / "bench.jsonl", [swebench_row("a__b-1")])
    smith = write_jsonl(tmp_path / "smith.jsonl", [{"instance_id": "x", "image_name": "img", "patch": BUG}])
    odd = write_jsonl(tmp_path / "odd.jsonl", [{"hello": 1}])
    assert detect_format(str(bench)) == "swebench" and detect_format(str(smith)) == "swesmith"
    assert detect_format("builtin") == "builtin"
    with pytest.raises(ValueError, match="tasks.format"):
        detect_format(str(odd))
    with pytest.raises(ValueError, match="allowed formats"):
        load_tasks(str(bench), format="csv")
    # An explicit format reads the file as that format: SWE-bench rows lack what SWE-smith needs.
    task_set = load_task_set(str(bench), format="swesmith")
    assert not task_set.tasks and task_set.skipped[0].field == "repo_path"


def test_reverse_patch_undoes_the_patch(tmp_path):
    repo = make_repo(tmp_path / "repo")
    diff = BUG + "--- /dev/null\n+++ b/calc/new.py\n@@ -0,0 +1,2 @@\n+X = 1\n+Y = 2\n"
    original = (repo / "calc" / "ops.py").read_text()
    for text in (diff, reverse_patch(diff)):
        subprocess.run(["patch", "-p1", "--batch", "-i", "-"], input=text, text=True, cwd=repo, check=True,
                       capture_output=True)
    assert (repo / "calc" / "ops.py").read_text() == original
    assert not (repo / "calc" / "new.py").exists()
    assert reverse_patch(reverse_patch(diff)) == diff


def test_swesmith_local_repo_materializes_the_buggy_workspace(tmp_path, cache):
    repo = make_repo(tmp_path / "repo")
    rows = write_jsonl(tmp_path / "synth.jsonl", [
        swesmith_row("calc-1", repo),
        swesmith_row("calc-2", "repo", patch=BUG.replace("a + b", "a * b")),  # relative repo_path; does not apply
        swesmith_row("calc-3", tmp_path / "missing"),
        swesmith_row("calc-4", repo, problem_statement=""),
    ])
    task_set = load_task_set(str(rows))
    (task,) = task_set.tasks
    assert {(s.row, s.field) for s in task_set.skipped} == {
        ("synth.jsonl:2 (calc-2)", "patch"), ("synth.jsonl:3 (calc-3)", "repo_path"),
        ("synth.jsonl:4 (calc-4)", "problem_statement")}
    workspace = Path(task.workspace_dir)
    assert workspace.parent == cache / "tasks" and workspace.name.startswith("swesmith-")
    assert "return a - b" in (workspace / "calc" / "ops.py").read_text()
    assert not (workspace / ".git").exists()
    assert task.test_command == "python -m pytest -q -rA -p no:cacheprovider"
    assert dict(task.test_files)["tests/test_ops.py"].startswith("from calc.ops")
    assert "pytest.ini" in dict(task.test_files) and "calc/ops.py" not in dict(task.test_files)
    assert task.repo == "calc" and task.source == "swesmith" and task.image == ""
    # The gold patch (reverse of the bug) restores the clean file.
    check = tmp_path / "check"
    shutil.copytree(workspace, check)
    subprocess.run(["patch", "-p1", "--batch", "-i", "-"], input=task.gold_patch, text=True, cwd=check, check=True,
                   capture_output=True)
    assert (check / "calc" / "ops.py").read_text() == (repo / "calc" / "ops.py").read_text()
    # Content-addressed: loading again reuses the workspace and leaves no staging directory.
    again = load_tasks(str(rows))
    assert again[0].workspace_dir == task.workspace_dir
    assert [p.name for p in (cache / "tasks").iterdir()] == [workspace.name]


def test_swesmith_hidden_cases_round_trip_and_malformed_ones_are_row_errors(tmp_path):
    from envs.tasks.task import HiddenCase

    repo = make_repo(tmp_path / "repo")
    case = {"module": "calc.ops", "function": "add", "args_json": "[2, 3]", "expected_json": "5"}
    bad = {
        "not-a-list": {"module": "calc.ops"},
        "missing-key": [{"module": "calc.ops", "function": "add", "args_json": "[2, 3]"}],
        "extra-key": [dict(case, shown="yes")],
        "not-a-string": [dict(case, expected_json=5)],
        "bad-module": [dict(case, module="calc/ops")],
        "bad-function": [dict(case, function="add()")],
        "args-not-list": [dict(case, args_json='{"a": 2}')],
        "expected-not-json": [dict(case, expected_json="five")],
        "encoded-garbage": "[{",
    }
    rows = write_jsonl(tmp_path / "synth.jsonl", [
        swesmith_row("calc-1", repo, hidden_cases=[case]),
        swesmith_row("calc-2", repo, hidden_cases=json.dumps([case, case])),  # JSON text (parquet writers)
        swesmith_row("calc-3", repo),  # SWE-smith's own rows carry none
        *(swesmith_row(f"bad-{name}", repo, hidden_cases=value) for name, value in bad.items()),
    ])
    task_set = load_task_set(str(rows))
    by_id = {task.id: task for task in task_set.tasks}
    assert by_id["calc-1"].hidden_cases == (HiddenCase("calc.ops", "add", "[2, 3]", "5"),)
    assert by_id["calc-2"].hidden_cases == (HiddenCase("calc.ops", "add", "[2, 3]", "5"),) * 2
    assert by_id["calc-3"].hidden_cases == ()
    assert sorted(s.row.split(" ")[1] for s in task_set.skipped) == sorted(f"(bad-{name})" for name in bad)
    assert {s.field for s in task_set.skipped} == {"hidden_cases"}
    reasons = {s.row.split(" ")[1]: s.reason for s in task_set.skipped}
    assert reasons["(bad-args-not-list)"] == "entry 0: args_json must be a JSON list, got dict"


def test_swesmith_image_rows(tmp_path):
    rows = write_jsonl(tmp_path / "smith.jsonl", [{
        "instance_id": "oauthlib__oauthlib.1fd52536.combine_file__abc", "repo": "swesmith/oauthlib__oauthlib.1fd52536",
        "patch": BUG, "FAIL_TO_PASS": json.dumps(["tests/test_ops.py::test_add"]), "PASS_TO_PASS": "[]",
        "problem_statement": "broken", "image_name": "swebench/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536"}])
    (task,) = load_tasks(str(rows))
    assert task.workspace_dir == "" and task.image.startswith("swebench/swesmith")
    assert "git apply" in task.setup[-1] and BUG in task.setup[-1]
    assert task.gold_patch == reverse_patch(BUG)


def write_harbor(root: Path, name: str, toml: str = 'version = "1.0"\n[metadata]\ndifficulty = "easy"\n',
                 test_sh: str | None = "echo 1 > /logs/verifier/reward.txt\n", dockerfile: bool = True) -> Path:
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "instruction.md").write_text(f"Do the thing for {name}.\n")
    (task / "task.toml").write_text(toml)
    if test_sh is not None:
        (task / "tests" / "test.sh").write_text(test_sh)
        (task / "tests" / "test_outputs.py").write_text("def test_x():\n    pass\n")
    if dockerfile:
        (task / "environment").mkdir()
        (task / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n")
    (task / "solution").mkdir()
    (task / "solution" / "solve.sh").write_text("echo solved\n")
    return task


def test_harbor_single_dir_and_dir_of_dirs(tmp_path):
    single = write_harbor(tmp_path / "set", "hello-world")
    write_harbor(tmp_path / "set", "with-image", toml='[environment]\ndocker_image = "ghcr.io/x/y:1"\n'
                 '[metadata]\nsplit = "eval"\n', dockerfile=False)
    write_harbor(tmp_path / "set", "no-tests", test_sh=None)
    write_harbor(tmp_path / "set", "bad-toml", toml="[metadata\n")
    write_harbor(tmp_path / "set", "no-env", dockerfile=False)
    assert detect_format(str(single)) == detect_format(str(tmp_path / "set")) == "harbor"
    (task,) = load_tasks(str(single))
    assert task.id == "hello-world" and task.problem_statement.startswith("Do the thing")
    assert task.stratum == "easy" and task.source == "harbor" and task.workspace_dir == ""
    assert task.image.startswith("swerve-harbor/hello-world:") and task.build_context.endswith("environment")
    assert task.gold_script == "bash /solution/solve.sh" and task.gold_patch == ""
    assert task.test_files == () and "test.sh" in dict(task.harbor.tests) and "bash /tests/test.sh" in task.test_command
    task_set = load_task_set(str(tmp_path / "set"), split="all")
    assert [t.id for t in task_set.tasks] == ["hello-world", "with-image"]
    assert task_set.tasks[1].image == "ghcr.io/x/y:1" and task_set.tasks[1].split == "eval"
    assert {(Path(s.row).name, s.field) for s in task_set.skipped} == {
        ("no-tests", "tests/test.sh"), ("bad-toml", "task.toml"), ("no-env", "environment/Dockerfile")}


def test_harbor_task_fields_come_from_task_toml_and_its_files(tmp_path):
    toml = ('schema_version = "1.4"\nartifacts = ["/out/result.txt", {source = "report.md"}]\n'
            '[task]\nname = "acme/count-words"\n[verifier]\ntimeout_sec = 90.0\nenvironment_mode = "separate"\n'
            '[verifier.env]\nMODE = "strict"\n[agent]\ntimeout_sec = 120\n'
            '[environment]\nworkdir = "/srv/app"\nnetwork_mode = "public"\n')
    task_dir = write_harbor(tmp_path, "count-words", toml=toml)
    (task_dir / "tests" / "Dockerfile").write_text("FROM x\nCOPY . /tests/\n")
    (task_dir / "tests" / "__pycache__").mkdir()
    (task_dir / "tests" / "__pycache__" / "test_outputs.cpython-311.pyc").write_bytes(b"\x00\xff binary")
    (task_dir / "tests" / ".pytest_cache").mkdir()
    (task_dir / "solution" / "wc.sh").write_bytes(b"#!/bin/sh\nwc -w\n")
    (task_dir / "solution" / "data.bin").write_bytes(bytes(range(256)))
    (task,) = load_tasks(str(task_dir))
    assert task.id == "acme/count-words" and task.repo == "harbor/acme/count-words"
    assert task.workdir == "/srv/app" and task.network == "public" and task.agent_timeout_s == 120.0
    spec = task.harbor
    assert spec.mode == "separate" and spec.tests_in_image and spec.build_context.endswith("tests")
    assert spec.image.startswith("swerve-harbor-verifier/") and spec.timeout_s == 90.0 and spec.env == (("MODE", "strict"),)
    assert [path for path, _ in spec.tests] == ["Dockerfile", "test.sh", "test_outputs.py"]  # leftovers ignored
    assert spec.artifacts == ("/logs/artifacts", "/out/result.txt", "report.md")
    assert spec.reward_files == ("reward.txt",)  # the only one its scripts write
    gold = {path: base64.b64decode(content) for path, content in task.gold_files}
    assert gold["data.bin"] == bytes(range(256)) and set(gold) == {"solve.sh", "wc.sh", "data.bin"}
    assert task.gold_script == "bash /solution/solve.sh" and "/solution" in task.scratch_dirs


@pytest.mark.parametrize("toml, mode", [("", "shared"), ('[verifier]\nenvironment_mode = "shared"\n', "shared"),
                                        ('[verifier.environment]\ndocker_image = "v:1"\n', "separate")])
def test_harbor_verifier_mode_resolves_as_harbor_does(tmp_path, toml, mode):
    (task,) = load_tasks(str(write_harbor(tmp_path, "t", toml=toml)))
    assert task.harbor.mode == mode and task.id == "t" and task.network == "none"
    if mode == "separate":  # an image of its own: the tests are copied in, not bundled
        assert task.harbor.image == "v:1" and not task.harbor.tests_in_image


def test_harbor_separate_verifier_without_its_own_image_reuses_the_environment(tmp_path):
    (task,) = load_tasks(str(write_harbor(tmp_path, "t", toml='[verifier]\nenvironment_mode = "separate"\n')))
    assert task.harbor.image == task.image and task.harbor.build_context == task.build_context
    assert not task.harbor.tests_in_image


def test_harbor_refuses_by_name_what_it_cannot_run(tmp_path):
    write_harbor(tmp_path, "multi", toml='[[steps]]\nname = "step-1"\n')
    write_harbor(tmp_path, "steps-dir")
    (tmp_path / "steps-dir" / "steps" / "step-1").mkdir(parents=True)
    write_harbor(tmp_path, "future", toml='schema_version = "2.0"\n')
    write_harbor(tmp_path, "windows", toml='[environment]\nos = "windows"\n')
    write_harbor(tmp_path, "secret", toml='[verifier.env]\nKEY = "${OPENAI_API_KEY}"\n')
    write_harbor(tmp_path, "allow", toml='[environment]\nnetwork_mode = "allowlist"\n')
    write_harbor(tmp_path, "link")
    (tmp_path / "link" / "tests" / "data").symlink_to("/etc/passwd")
    skipped = {Path(s.row).name: (s.field, s.reason) for s in load_task_set(str(tmp_path), split="all").skipped}
    assert skipped["multi"][0] == skipped["steps-dir"][0] == "task.toml [[steps]]"
    assert "multi-step" in skipped["multi"][1]
    assert "harbor==0.25.0" in skipped["future"][1] and skipped["windows"][0] == "task.toml [environment] os"
    assert "${VAR}" in skipped["secret"][1] and "allowlist" in skipped["allow"][1]
    assert skipped["link"][0] == "tests/data"  # the real path, not a guess