"""The suite's own clock (tests/suite_clock.py): the per-test table, the set-up steps and the budget
warning that every `make test` ends with."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.suite_clock import SUITE_BUDGET_S, report, setup_steps

REPO = Path(__file__).resolve().parents[1]


def test_the_table_ranks_tests_by_their_whole_time_and_totals_each_file():
    tests = [{"test": "tests/a.py::one", "setup_s": 0.0, "call_s": 1.0, "teardown_s": 0.0, "outcome": "passed"},
             {"test": "tests/b.py::two", "setup_s": 5.0, "call_s": 0.5, "teardown_s": 0.1, "outcome": "passed"},
             {"test": "tests/a.py::three", "setup_s": 0.0, "call_s": 2.0, "teardown_s": 0.0, "outcome": "failed"}]
    table = report(tests, pytest_wall_s=9.0, suite_start=100.0, steps={"torch": 25.0}, markexpr="", now=160.0)
    assert [t["test"] for t in table["tests"]] == ["tests/b.py::two", "tests/a.py::three", "tests/a.py::one"]
    assert table["tests"][0]["seconds"] == 5.6  # a module fixture's set-up is the first test's
    assert table["files_s"] == {"tests/b.py": 5.6, "tests/a.py": 3.0}
    assert (table["suite_wall_s"], table["pytest_wall_s"], table["setup_steps_s"]) == (60.0, 9.0, {"torch": 25.0})
    assert table["budget_s"] == SUITE_BUDGET_S == 1800


def test_setup_steps_sum_a_step_met_twice_and_a_missing_file_is_no_steps(tmp_path):
    times = tmp_path / "setup-steps.txt"
    times.write_text("debian 41.5\ntorch 24.0\ndocker-base-image 50.2\ndebian 0.1\n")
    assert setup_steps(str(times)) == {"debian": 41.6, "torch": 24.0, "docker-base-image": 50.2}
    assert setup_steps(str(tmp_path / "none.txt")) == {} and setup_steps(None) == {}


def test_a_run_over_its_budget_warns_naming_the_slowest_and_writes_the_json(tmp_path):
    """A real pytest run of a tiny suite, told that make started 31 minutes ago."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text("from tests.suite_clock import (pytest_runtest_logreport, "
                                       "pytest_sessionstart, pytest_terminal_summary)\n")
    (suite / "test_two.py").write_text(textwrap.dedent("""\
        import time

        def test_sleepy():
            time.sleep(0.3)

        def test_quick():
            pass
    """))
    out = tmp_path / "times.json"
    steps = tmp_path / "steps.txt"
    steps.write_text("venv 3.0\n")
    env = {"SWERVE_SUITE_START": str(__import__("time").time() - 31 * 60), "SWERVE_TEST_TIMES": str(out),
           "SWERVE_SETUP_TIMES": str(steps), "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the 2 slowest tests" in done.stdout and "set-up: venv 3 s" in done.stdout
    warning = next(line for line in done.stdout.splitlines() if line.startswith("warning: this run took"))
    assert "over the suite's 30-minute budget" in warning and "test_two.py::test_sleepy" in warning
    table = json.loads(out.read_text())
    assert table["tests"][0]["test"].endswith("test_two.py::test_sleepy") and table["tests"][0]["call_s"] >= 0.3
    assert table["suite_wall_s"] >= 31 * 60 and table["setup_steps_s"] == {"venv": 3.0}
