"""A small fixture repository for the injector's tests, and the check that a synthesized row is a
real bug: its patch breaks exactly FAIL_TO_PASS and reversing it fixes everything."""
import shutil
import subprocess
import textwrap
from pathlib import Path

from envs.tasks.synth.pytest_run import run_pytest

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
