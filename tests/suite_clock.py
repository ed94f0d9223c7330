"""Where the suite's time goes, at the end of every run (hooks imported by tests/conftest.py).

Every run writes the per-test table (setup, call and teardown seconds, outcome) to a JSON file
(`SWERVE_TEST_TIMES`, else runs/test-times.json) and prints the slowest tests. `make test` also
hands over when it started (`SWERVE_SUITE_START`, epoch seconds) and the set-up steps it timed
(`SWERVE_SETUP_TIMES`, a file of `step seconds` lines), so the summary shows the whole run's wall
time and each set-up step's, and warns, naming the slowest tests, when the run is over its budget
(a warning, never a failure: a timing is no test's verdict).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

# The suite's budget, set-up included: CI's limit is 90 minutes, and a suite that cannot be run
# before every submission does not protect the product.
SUITE_BUDGET_S = 30 * 60
SLOWEST_SHOWN = 25
# The fast tier (`make test-fast`, -m "not slow") is the 3-minute one: a test with a case over this
# belongs in the slow tier.
FAST_TEST_S = 1.0
FAST_TIER = "not slow"
# The second tier (`make check`, -m check): each check's result is recorded in BENCHMARKS.md.
CHECK_TIER = "check"

_started = {"wall": time.time()}
_tests: dict[str, dict] = {}


def pytest_sessionstart(session):
    _started["wall"] = time.time()


def pytest_runtest_logreport(report):
    entry = _tests.setdefault(report.nodeid, {"test": report.nodeid, "setup_s": 0.0, "call_s": 0.0,
                                              "teardown_s": 0.0, "outcome": "passed"})
    entry[f"{report.when}_s"] = round(report.duration, 3)
    if report.failed:
        entry["outcome"] = "error" if report.when != "call" else "failed"
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"


def _seconds(entry: dict) -> float:
    return entry["setup_s"] + entry["call_s"] + entry["teardown_s"]


def setup_steps(path: str | None) -> dict[str, float]:
    """{step: seconds} from the file `make test` writes (`step seconds` per line); a step met twice in
    one run (a sub-make finding it done) is the sum of its times."""
    steps: dict[str, float] = {}
    if not path or not Path(path).is_file():
        return steps
    for line in Path(path).read_text().splitlines():
        name, _, seconds = line.rpartition(" ")
        if name:
            steps[name] = round(steps.get(name, 0.0) + float(seconds), 1)
    return steps


def report(tests: list[dict], pytest_wall_s: float, suite_start: float | None, steps: dict[str, float],
           markexpr: str, now: float) -> dict:
    """The run's table: every test, slowest first, with the per-file totals and the wall times."""
    ranked = sorted(tests, key=_seconds, reverse=True)
    by_file: dict[str, float] = {}
    for entry in ranked:
        entry["seconds"] = round(_seconds(entry), 3)
        path = entry["test"].split("::", 1)[0]
        by_file[path] = by_file.get(path, 0.0) + entry["seconds"]
    return {
        "markexpr": markexpr, "pytest_wall_s": round(pytest_wall_s, 1),
        "suite_wall_s": round(now - suite_start, 1) if suite_start else None,
        "budget_s": SUITE_BUDGET_S, "setup_steps_s": steps, "tests_s": round(sum(e["seconds"] for e in ranked), 1),
        "files_s": dict(sorted(((k, round(v, 1)) for k, v in by_file.items()), key=lambda kv: -kv[1])),
        "tests": ranked,
    }


def checks(tests: list[dict]) -> list[dict]:
    """One row per test function (its parametrized cases together): how many cases passed, failed
    and were skipped, and the seconds they took."""
    rows: dict[str, dict] = {}
    for entry in tests:
        name = entry["test"].split("[", 1)[0]
        row = rows.setdefault(name, {"check": name, "cases": 0, "passed": 0, "failed": 0, "skipped": 0,
                                     "seconds": 0.0})
        row["cases"] += 1
        row["failed" if entry["outcome"] in ("failed", "error") else entry["outcome"]] += 1
        row["seconds"] = round(row["seconds"] + _seconds(entry), 1)
    return sorted(rows.values(), key=lambda r: r["check"])


def _fast_tier_summary(reporter, tests: list[dict]) -> None:
    over = [e for e in tests if e["seconds"] > FAST_TEST_S]
    if over:
        reporter.section(f"over {FAST_TEST_S:.0f} s, not marked slow (make test-fast is the 3-minute tier)")
        for entry in over[:20]:
            reporter.write_line(f"{entry['seconds']:6.1f} s  {entry['test']}")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hasattr(config, "workerinput"):
        return  # a pytest-xdist worker: the controller holds every worker's reports and writes the table
    markexpr = config.getoption("markexpr") or ""
    start = os.environ.get("SWERVE_SUITE_START")
    table = report(list(_tests.values()), time.time() - _started["wall"], float(start) if start else None,
                   setup_steps(os.environ.get("SWERVE_SETUP_TIMES")), markexpr, time.time())
    out = Path(os.environ.get("SWERVE_TEST_TIMES") or "runs/test-times.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(table, indent=1) + "\n")
    if markexpr == FAST_TIER:
        _fast_tier_summary(terminalreporter, table["tests"])
    if markexpr == CHECK_TIER and table["tests"]:
        from bench.registry import TABLE, record_checks

        record_checks(checks(table["tests"]))
        terminalreporter.write_line(f"make check: each check's result is recorded in {TABLE}")
    if not table["tests"]:
        return  # nothing ran (a collection, or an empty selection): nothing to tell
    write = terminalreporter.write_line
    terminalreporter.section(f"the {min(SLOWEST_SHOWN, len(table['tests']))} slowest tests (all: {out})")
    for entry in table["tests"][:SLOWEST_SHOWN]:
        write(f"{entry['seconds']:7.1f} s  {entry['test']}")
    if table["setup_steps_s"]:
        write("set-up: " + ", ".join(f"{name} {s:.0f} s" for name, s in table["setup_steps_s"].items()))
    wall = table["suite_wall_s"]
    write(f"pytest {table['pytest_wall_s']:.0f} s" + (f"; the whole run, set-up included, {wall:.0f} s" if wall else ""))
    if wall and wall > SUITE_BUDGET_S:
        names = ", ".join(f"{e['test']} ({e['seconds']:.0f} s)" for e in table["tests"][:5])
        terminalreporter.write_line(
            f"warning: this run took {wall / 60:.1f} min, over the suite's {SUITE_BUDGET_S // 60}-minute budget; "
            f"the slowest: {names}", yellow=True, bold=True)
