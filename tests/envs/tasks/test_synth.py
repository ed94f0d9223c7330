"""The SWE-smith-style bug injector: mutators, synthesis on a fixture repo and on a real
third-party package (``referencing``, copied from site-packages with its own tests)."""

import ast
import difflib
import importlib.util
import json
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from configs.schema import SynthConfig
from envs.tasks.synth import cli
from envs.tasks.synth.injector import make_patch, stratum_for, synthesize
from envs.tasks.synth.mutators import FAMILIES, find_mutations
from envs.tasks.synth.pytest_run import run_pytest

# ---------------------------------------------------------------------------------------
# Mutators

SNIPPET = textwrap.dedent('''\
    import os  # a comment that must survive


    def f(x, y):
        """Docstring."""
        total = 0
        if x < y and y > 0:
            total += x * 2
        else:
            total = y - 1
        log(x, y)
        if not x:
            return None
        return total if x == 3 else -total
''')


def _changed_lines(old, new):
    diff = [l for l in difflib.unified_diff(old.splitlines(), new.splitlines(), n=0, lineterm="")
            if l[:1] in "+-" and not l.startswith(("+++", "---"))]
    return diff


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_makes_minimal_parsing_edits(family):
    muts = find_mutations(SNIPPET, "pkg/mod.py", seed=0, families=[family])
    assert muts, family
    for m in muts:
        assert m.family == family and m.file == "pkg/mod.py" and m.description
        assert m.new_text != SNIPPET
        ast.parse(m.new_text)
        # only the replaced span differs; everything else is byte-identical
        assert m.new_text == SNIPPET[: m.start] + m.replacement + SNIPPET[m.end :]
        assert "# a comment that must survive" in m.new_text
        changed = _changed_lines(SNIPPET, m.new_text)
        limit = 6 if family == "swap_if_else" else 3
        assert 0 < len(changed) <= limit, (family, changed)


def test_compare_and_binary_operators():
    compare = [m.new_text for m in find_mutations(SNIPPET, families=["change_compare_op"])]
    assert any("if x <= y and y > 0:" in t or "if x > y and y > 0:" in t
               or "y >= 0" in t or "y < 0" in t for t in compare)
    assert any("x != 3" in t for t in compare)
    binop = [m for m in find_mutations(SNIPPET, families=["change_binary_op"])]
    texts = [m.new_text for m in binop]
    assert any("total -= x * 2" in t for t in texts)
    assert any("total = y + 1" in t for t in texts)
    assert any("x + 2" in t or "x / 2" in t for t in texts)


def test_constant_negate_bool_swap_remove():
    consts = [m.new_text for m in find_mutations(SNIPPET, families=["change_constant"])]
    assert any("total = 1\n" in t for t in consts)  # 0 -> 1
    assert any("x == 4" in t or "x == 2" in t for t in consts)
    neg = [m.new_text for m in find_mutations(SNIPPET, families=["negate_condition"])]
    assert any("if not (x < y and y > 0):" in t for t in neg)
    assert any("    if x:\n        return None" in t for t in neg)
    assert any("total if not (x == 3) else" in t for t in neg)
    boolop = [m.new_text for m in find_mutations(SNIPPET, families=["change_bool_op"])]
    assert boolop == [SNIPPET.replace("x < y and y > 0", "x < y or y > 0")]
    swap = find_mutations(SNIPPET, families=["swap_if_else"])
    assert [m.new_text for m in swap] == [SNIPPET.replace(
        "        total += x * 2\n    else:\n        total = y - 1\n",
        "        total = y - 1\n    else:\n        total += x * 2\n")]
    args = [m.new_text for m in find_mutations(SNIPPET, families=["swap_call_args"])]
    assert args == [SNIPPET.replace("log(x, y)", "log(y, x)")]
    removed = [m.new_text for m in find_mutations(SNIPPET, families=["remove_statement"])]
    assert SNIPPET.replace("        total = 0\n", "").replace("    total = 0\n", "") in removed
    assert SNIPPET.replace("    log(x, y)\n", "") in removed
    assert SNIPPET.replace("    if not x:\n        return None\n", "") in removed
    # a sole statement in a block is replaced by `pass`, not deleted
    assert SNIPPET.replace("        total = y - 1\n", "        pass\n") in removed
    # module-level statements (the import) are never removed
    assert all("import os" in t for t in removed)


def test_mutations_are_deterministic_and_seeded():
    a = find_mutations(SNIPPET, "m.py", seed=1)
    b = find_mutations(SNIPPET, "m.py", seed=1)
    assert [m.new_text for m in a] == [m.new_text for m in b]
    assert set(m.family for m in a) == set(FAMILIES)


def test_non_ascii_crlf_and_annotations():
    src = 'def g(s: int | None = 1) -> "é":\r\n    t = "héllo"; u = 2\r\n    return len(t) + u\r\n'
    muts = find_mutations(src, families=["change_binary_op", "change_constant", "remove_statement"])
    texts = [m.new_text for m in muts]
    assert 'def g(s: int | None = 1) -> "é":\r\n    t = "héllo"; u = 2\r\n    return len(t) - u\r\n' in texts
    assert 'def g(s: int | None = 1) -> "é":\r\n    t = "héllo"; u = 3\r\n    return len(t) + u\r\n' in texts \
        or 'def g(s: int | None = 1) -> "é":\r\n    t = "héllo"; u = 1\r\n    return len(t) + u\r\n' in texts
    assert not any("int & None" in t for t in texts)  # annotations are left alone
    assert not any(m.family == "remove_statement" for m in muts)  # `a; b` lines are not cut
    assert find_mutations("def broken(:\n") == []


def test_make_patch_without_trailing_newline(tmp_path):
    old, new = "x = 1\ny = 2", "x = 1\ny = 3"
    (tmp_path / "m.py").write_text(old)
    patch = make_patch("m.py", old, new)
    assert patch.startswith("--- a/m.py\n+++ b/m.py\n")
    subprocess.run(["patch", "-p1", "-s"], input=patch, text=True, cwd=tmp_path, check=True)
    assert (tmp_path / "m.py").read_text() == new


# ---------------------------------------------------------------------------------------
# Synthesis on a small fixture repository

MODULE = textwrap.dedent('''\
    def clamp(x, lo, hi):
        if x < lo:
            return lo
        if x > hi:
            return hi
        return x


    def total(xs):
        s = 0
        for x in xs:
            s += x
        return s


    def sign(x):
        if x >= 0:
            return 1
        else:
            return -1


    def both(a, b):
        return bool(a and b)


    def minus(a, b):
        return a - b


    def span(xs):
        return minus(max(xs), min(xs))
''')

TESTS = textwrap.dedent('''\
    from calc.ops import both, clamp, minus, sign, span, total


    def test_clamp_low():
        assert clamp(-5, 0, 10) == 0

    def test_clamp_high():
        assert clamp(50, 0, 10) == 10

    def test_clamp_inside():
        assert clamp(5, 0, 10) == 5

    def test_total():
        assert total([1, 2, 3]) == 6

    def test_sign():
        assert sign(3) == 1
        assert sign(-3) == -1

    def test_both():
        assert both(1, 0) is False

    def test_minus():
        assert minus(5, 3) == 2

    def test_span():
        assert span([4, 1, 9]) == 8
''')


def make_fixture_repo(root: Path) -> Path:
    repo = root / "calcrepo"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "calc" / "__init__.py").write_text("")
    (repo / "calc" / "ops.py").write_text(MODULE)
    (repo / "tests" / "test_ops.py").write_text(TESTS)
    return repo


def check_row(row: dict, scratch: Path) -> None:
    """The patch applies with patch -p1 to a fresh copy, breaks exactly F2P, keeps P2P,
    and reversing it (the gold fix) makes everything pass again."""
    src = Path(row["repo_path"])
    copy = scratch / row["instance_id"]
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["patch", "-p1", "-s", "--no-backup-if-mismatch"], input=row["patch"],
                   text=True, cwd=copy, check=True)
    ids = row["FAIL_TO_PASS"] + row["PASS_TO_PASS"]
    bugged = run_pytest(copy, 120, extra_args=ids)
    assert bugged.passed == set(row["PASS_TO_PASS"]), bugged.output[-2000:]
    subprocess.run(["patch", "-p1", "-R", "-s", "--no-backup-if-mismatch"], input=row["patch"],
                   text=True, cwd=copy, check=True)
    fixed = run_pytest(copy, 120, extra_args=ids)
    assert fixed.passed == set(ids), fixed.output[-2000:]


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


# ---------------------------------------------------------------------------------------
# A real third-party repository: `referencing` (python-jsonschema/referencing), copied from
# site-packages together with the tests it ships inside the package.


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


# ---------------------------------------------------------------------------------------
# Hidden cases: calls recorded from the clean suite, expected values from the clean repository

RECORDED_MODULE = textwrap.dedent('''\
    import random


    class Flag(int):
        pass


    class Box:
        def size(self, n):
            return n


    def double(x):
        return x * 2


    def pair(x):
        return (x, x)


    def first(xs):
        return xs[0]


    def count_keys(d):
        return len(d)


    def pop_last(xs):
        xs.pop()
        return len(xs)


    def make_flag(x):
        return Flag(x)


    def big(n):
        return "x" * n


    def scaled(x, *, by=2):
        return x * by


    def roll(x):
        return random.random() + x


    def inc(i):
        return i + 1


    def ratio(a, b):
        return a / b
''')

RECORDED_TESTS = textwrap.dedent('''\
    from pkg.util import (Box, big, count_keys, double, first, inc, make_flag, pair, pop_last, ratio, roll,
                          scaled)


    def helper(x):
        return x


    def test_calls():
        assert Box().size(3) == 3
        assert double(helper(4)) == 8
        assert pair(1) == (1, 1)
        assert first([5, 6]) == 5 and first((7, 8)) == 7
        assert count_keys({"a": 1}) == 1 and count_keys({1: 2}) == 1
        assert pop_last([1, 2, 3]) == 2
        assert make_flag(3) == 3
        assert len(big(10)) == 10 and len(big(5000)) == 5000
        assert scaled(2) == 4
        assert roll(0) < 1
        assert [inc(i) for i in range(30)][-1] == 30
        assert ratio(1, 4) == 0.25

    def test_raises():
        try:
            ratio(1, 0)
        except ZeroDivisionError:
            pass
''')


def test_recorder_keeps_plain_calls_of_module_level_functions(tmp_path):
    from envs.tasks.synth.call_recorder import MAX_CALLS_PER_FUNCTION, CallRecorder
    from envs.tasks.synth.injector import candidate_files

    repo = tmp_path / "rec"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "util.py").write_text(RECORDED_MODULE)
    (repo / "tests" / "test_util.py").write_text(RECORDED_TESTS)
    recorder = CallRecorder(tmp_path / "scratch", repo, candidate_files(repo))
    run = run_pytest(repo, 120, extra_args=recorder.pytest_args, extra_env=recorder.env, extra_paths=recorder.paths)
    assert run.passed == {"tests/test_util.py::test_calls", "tests/test_util.py::test_raises"}, run.output[-2000:]
    recorded = {}
    for module, function, args_json, result_json in recorder.recording():
        assert module == "pkg.util"
        recorded.setdefault(function, []).append((args_json, result_json))
    # Methods, the tests' own functions, keyword-only signatures, tuples, int keys, subclasses of
    # int and oversized values are left out; arguments are taken before the call changes them.
    assert set(recorded) == {"double", "first", "count_keys", "pop_last", "big", "roll", "inc", "ratio"}
    assert recorded["double"] == [("[4]", "8")]
    assert recorded["first"] == [("[[5, 6]]", "5")]
    assert recorded["count_keys"] == [('[{"a": 1}]', "1")]
    assert recorded["pop_last"] == [("[[1, 2, 3]]", "2")]
    assert recorded["big"] == [("[10]", '"xxxxxxxxxx"')]
    assert recorded["inc"] == [(f"[{i}]", str(i + 1)) for i in range(MAX_CALLS_PER_FUNCTION)]
    # A call that raised is seen as returning None; the clean replay drops it, and the call whose
    # value depends on the process (a random number) too.
    assert ("[1, 0]", "null") in recorded["ratio"]
    book = recorder.book(sys.executable, 60)
    assert ("pkg.util", "roll") not in book.calls
    assert [(c.args_json, c.expected_json) for c in book.calls[("pkg.util", "ratio")]] == [("[1, 4]", "0.25")]
    assert book.count() == 6 + MAX_CALLS_PER_FUNCTION


# Not synthesis's runner: each call's canonical JSON value, or the exception it raised.
_REPLAY = """
import importlib, json, sys
sys.path.insert(0, ".")
def value(module, function, args):
    try:
        return json.dumps(getattr(importlib.import_module(module), function)(*args), sort_keys=True)
    except Exception as error:
        return "raised " + type(error).__name__
print(json.dumps([value(*call) for call in json.load(sys.stdin)]))
"""


def _outcomes(workdir: Path, cases: list) -> list:
    calls = [[case["module"], case["function"], json.loads(case["args_json"])] for case in cases]
    done = subprocess.run([sys.executable, "-I", "-B", "-c", _REPLAY], input=json.dumps(calls), cwd=workdir,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@pytest.mark.slow
def test_synthesized_tasks_carry_hidden_cases_with_the_clean_values(tmp_path):
    from envs.tasks.hidden_cases import canonical

    repo = make_fixture_repo(tmp_path)
    stats = {}
    rows = synthesize(repo, SynthConfig(num_tasks=4, seed=0, timeout_s=120), stats=stats)
    assert len(rows) == 4 and stats["with_hidden_cases"] == 4 and stats["no_hidden_cases"] == {}
    for row in rows:
        cases = row["hidden_cases"]
        assert 1 <= len(cases) <= 4 and all(case["module"] == "calc.ops" for case in cases)
        assert row["description"].split("`")[1] == cases[0]["function"]  # the mutated function's calls
        # Run by another runner than synthesis used: the clean repository gives every expected value.
        expected = [canonical(case["expected_json"]) for case in cases]
        assert _outcomes(repo, cases) == expected
        mutated = tmp_path / f"mutated-{row['instance_id']}"
        shutil.copytree(repo, mutated)
        subprocess.run(["patch", "-p1", "-s"], input=row["patch"], text=True, cwd=mutated, check=True)
        assert any(value != want for value, want in zip(_outcomes(mutated, cases), expected))


@pytest.mark.slow
def test_a_synthesized_task_is_graded_on_its_hidden_cases(tmp_path, make_sandbox, monkeypatch):
    """Loaded back from its row and graded in a sandbox: the gold patch passes every hidden case;
    a `minus` whose result equals anything passes the tests but none of the hidden cases."""
    from envs.grading.grader import grade
    from envs.tasks.loaders import load_tasks
    from envs.tasks.pytest_summary import PASSED

    monkeypatch.setenv("SWERVE_CACHE_DIR", str(tmp_path / "cache"))
    repo = make_fixture_repo(tmp_path)
    rows = synthesize(repo, SynthConfig(num_tasks=2, seed=0, timeout_s=60, families=["change_binary_op"]))
    (row,) = [r for r in rows if "+    return a + b" in r["patch"]]  # minus: `a - b` -> `a + b`
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    (task,) = load_tasks(str(tmp_path / "rows.jsonl"))
    assert {(case.module, case.function) for case in task.hidden_cases} == {("calc.ops", "minus")}
    sandbox = make_sandbox()
    sandbox.start(task)
    unfixed = grade(sandbox, task, 60)
    assert not unfixed.resolved and any(status != PASSED for status in unfixed.hidden_status.values())

    sandbox.write_files({".gold.patch": task.gold_patch})
    # The fix keeps the file's size and lands within the second the workspace was written: the
    # bytecode the first grading cached would still look current (pyc checks mtime and size).
    assert sandbox.exec("patch -p1 < .gold.patch && rm .gold.patch && rm -rf calc/__pycache__").exit_code == 0
    fixed = grade(sandbox, task, 60)
    assert fixed.resolved, fixed.output
    assert list(fixed.hidden_status.values()) == [PASSED] * len(task.hidden_cases)

    always_equal = "\n\ndef minus(a, b):\n    return type('S', (int,), {'__eq__': lambda s, o: True})(0)\n"
    sandbox.write_files({"calc/ops.py": MODULE + always_equal})
    fooled = grade(sandbox, task, 60)
    assert set(fooled.test_status.values()) == {PASSED}, fooled.output
    assert not fooled.resolved and all(status.startswith("FAILED") for status in fooled.hidden_status.values())
