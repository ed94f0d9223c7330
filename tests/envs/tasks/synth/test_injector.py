"""The SWE-smith-style bug injector (envs/tasks/synth/injector.py): synthesis on a fixture repo and on a
real third-party package (``referencing``, copied from site-packages with its own tests), and its CLI."""
import importlib.util
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from configs.schema import SynthConfig
from envs.tasks.synth import cli
from envs.tasks.synth.injector import make_patch, stratum_for, synthesize
from envs.tasks.synth.mutators import FAMILIES
from tests.envs.tasks.synth.fixture_repo import check_row, make_fixture_repo


def test_make_patch_without_trailing_newline(tmp_path):
    old, new = "x = 1\ny = 2", "x = 1\ny = 3"
    (tmp_path / "m.py").write_text(old)
    patch = make_patch("m.py", old, new)
    assert patch.startswith("--- a/m.py\n+++ b/m.py\n")
    subprocess.run(["patch", "-p1", "-s"], input=patch, text=True, cwd=tmp_path, check=True)
    assert (tmp_path / "m.py").read_text() == new


REQUIRED_KEYS = {"instance_id", "repo", "patch", "FAIL_TO_PASS", "PASS_TO_PASS",
                 "problem_statement", "image_name", "repo_path", "family", "stratum", "split"}


@pytest.mark.slow
def test_synthesize_fixture_repo(tmp_path):
    repo = make_fixture_repo(tmp_path)
    before = (repo / "calc" / "ops.py").read_text()
    stats = {}
    rows = synthesize(repo, SynthConfig(num_tasks=3, seed=0, timeout_s=120), stats=stats)
    assert len(rows) == 3 and stats["kept"] == 3 and stats["tried"] >= 3
    assert (repo / "calc" / "ops.py").read_text() == before  # the source repo is untouched
    assert not list(repo.rglob("__pycache__"))
    assert len({r["instance_id"] for r in rows}) == 3
    for row in rows:
        assert REQUIRED_KEYS <= set(row)
        assert row["repo"] == "calcrepo" and row["instance_id"].startswith("calcrepo.")
        assert row["repo_path"] == str(repo.resolve()) and row["split"] == "train"
        assert row["image_name"] == "" and row["family"] in FAMILIES
        assert row["stratum"] == stratum_for(len(row["FAIL_TO_PASS"]))
        assert row["patch"].startswith("--- a/calc/ops.py\n+++ b/calc/ops.py\n")
        assert row["FAIL_TO_PASS"] and row["PASS_TO_PASS"]
        assert not set(row["FAIL_TO_PASS"]) & set(row["PASS_TO_PASS"])
        statement = row["problem_statement"]
        for nid in row["FAIL_TO_PASS"]:
            assert nid in statement
        # the statement describes behaviour, not the edit
        removed = [l[1:].strip() for l in row["patch"].splitlines()
                   if l.startswith("-") and not l.startswith("---")]
        added = [l[1:].strip() for l in row["patch"].splitlines()
                 if l.startswith("+") and not l.startswith("+++")]
        for line in removed + added:
            if line:
                assert line not in statement, line
        check_row(row, tmp_path)
    json.dumps(rows)
    # deterministic given the seed
    again = synthesize(repo, SynthConfig(num_tasks=3, seed=0, timeout_s=120))
    assert [r["instance_id"] for r in again] == [r["instance_id"] for r in rows]


@pytest.mark.slow
def test_problem_statement_quotes_the_failing_assertion(tmp_path):
    repo = make_fixture_repo(tmp_path)
    rows = synthesize(repo, SynthConfig(num_tasks=2, seed=0, timeout_s=60, families=["change_binary_op"]))
    (row,) = [r for r in rows if "+    return a + b" in r["patch"]]
    # `a - b` -> `a + b` in minus: the assertion and the wrong value are quoted
    assert "tests/test_ops.py::test_minus" in row["FAIL_TO_PASS"]
    statement = row["problem_statement"]
    assert "assert minus(5, 3) == 2" in statement and "got `8`" in statement
    assert "return a + b" not in statement and "return a - b" not in statement


@pytest.mark.slow
def test_synthesize_rejects_repo_without_passing_tests(tmp_path):
    from envs.tasks.synth.injector import SynthError

    repo = tmp_path / "bad"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_x.py").write_text("def test_x():\n    assert False\n")
    with pytest.raises(SynthError):
        synthesize(repo, SynthConfig(num_tasks=1, timeout_s=60))


@pytest.mark.slow
def test_cli_writes_jsonl_and_table(tmp_path, capsys):
    import argparse

    repo = make_fixture_repo(tmp_path)
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    out = tmp_path / "out" / "tasks.jsonl"
    args = parser.parse_args(["--repo", str(repo), "--out", str(out), "-n", "2", "--seed", "3",
                              "--timeout-s", "120", "--quiet"])
    assert cli.run(args) == 0
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    assert len(rows) == 2
    printed = capsys.readouterr().out
    assert "#F2P" in printed and "candidates:" in printed and "kept: 2" in printed
    assert "with hidden cases: 2 of 2" in printed
    for row in rows:
        assert row["instance_id"] in printed


def _referencing_copy(root: Path) -> Path | None:
    spec = importlib.util.find_spec("referencing")
    if spec is None or not spec.submodule_search_locations:
        return None
    pkg = Path(list(spec.submodule_search_locations)[0])
    if not (pkg / "tests" / "test_core.py").exists():
        return None
    repo = root / "referencing-repo"
    shutil.copytree(pkg, repo / "referencing", ignore=shutil.ignore_patterns("__pycache__"))
    # needs the external JSON-Schema referencing suite checkout, which is not shipped
    (repo / "referencing" / "tests" / "test_referencing_suite.py").unlink(missing_ok=True)
    return repo


@pytest.mark.slow
def test_synthesize_real_third_party_repo(tmp_path):
    repo = _referencing_copy(tmp_path)
    if repo is None:
        pytest.skip("referencing (with its tests) is not installed")
    t0 = time.monotonic()
    stats = {}
    rows = synthesize(repo, SynthConfig(num_tasks=2, seed=0, timeout_s=240), stats=stats)
    elapsed = time.monotonic() - t0
    assert len(rows) == 2, stats
    assert stats["baseline_passed"] > 100
    for row in rows:
        assert row["patch"].startswith("--- a/referencing/")
        assert all(nid.startswith("referencing/tests/") for nid in row["FAIL_TO_PASS"])
        assert len(row["PASS_TO_PASS"]) == 20  # capped
        check_row(row, tmp_path)
    print(f"referencing: {len(rows)} tasks from {stats['tried']} tries in {elapsed:.1f}s")


@pytest.mark.slow
def test_synthesized_third_party_tasks_pass_the_sanity_gate(tmp_path, monkeypatch):
    """synth -> rows on disk -> loaded back by the SWE-smith loader -> validated in real sandboxes."""
    from actors.cli.main import main

    repo = _referencing_copy(tmp_path)
    if repo is None:
        pytest.skip("referencing (with its tests) is not installed")
    monkeypatch.setenv("SWERVE_CACHE_DIR", str(tmp_path / "cache"))
    rows = tmp_path / "rows.jsonl"
    assert main(["tasks", "synth", "--repo", str(repo), "--out", str(rows), "-n", "2", "--quiet"]) == 0
    quarantine = tmp_path / "quarantine.json"
    code = main(["tasks", "validate", "--source", str(rows), f"tasks.quarantine_file={quarantine}"])
    assert code == 0
    assert json.loads(quarantine.read_text())["tasks"] == {}
