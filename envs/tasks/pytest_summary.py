"""pytest's `-rA` short test summary, read in one place.

With `-rA` pytest ends its output with one line per test: "PASSED tests/t.py::test_a",
"FAILED tests/t.py::test_b - AssertionError: ...". The grader reads the status of each listed
test from it (envs/grading/grader.py), `swerve tasks synth` which tests a mutation broke
(envs/tasks/synth/pytest_run.py), and `python -m envs.tasks.builtin.check` the status of a whole suite.
"""
from __future__ import annotations

from typing import Container, Dict, Iterable, List, Optional, Tuple

# The test command of the tasks whose grading reads this summary (built-in, micro, SWE-smith):
# -rA puts every test in it, passing ones included.
PYTEST_COMMAND = "python -m pytest -q -rA -p no:cacheprovider"

PASSED = "PASSED"
# A listed test without a summary line (not collected, or the run died before reporting it).
MISSING = "MISSING"
# Only PASSED counts as passing.
STATUSES = (PASSED, "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")
SUMMARY_HEADER = "short test summary info"


def summary_lines(output: str) -> List[Tuple[str, str]]:
    """(status, rest) of each summary line: a line that starts with a status word and a space.
    `rest` is the node id, then " - <message>" when pytest gave one. When the output holds the
    summary's header ("=== short test summary info ==="), only lines after it count: a test
    printing "PASSED <id>" into its captured output (shown above the summary) is not a
    summary line. Without the header (cut from a long output, or a bare list) every line counts."""
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("=") and SUMMARY_HEADER in line:
            lines = lines[index + 1:]
            break
    found = []
    for line in lines:
        word, _, rest = line.partition(" ")
        if word in STATUSES:
            found.append((word, rest.strip()))
    return found


def node_id_of(rest: str, node_ids: Container[str]) -> Optional[str]:
    """The id among `node_ids` that a summary line's `rest` names: all of it, or the part before
    one of its " - " (a parametrized id may itself hold " - ", so the first one is not enough)."""
    if rest in node_ids:
        return rest
    start = rest.find(" - ")
    while start != -1:
        if rest[:start] in node_ids:
            return rest[:start]
        start = rest.find(" - ", start + 1)
    return None


def parse_test_status(output: str, node_ids: Iterable[str]) -> Dict[str, str]:
    """Status of each node id from the summary ("FAILED id - reason"); ids without a line are MISSING."""
    wanted = set(node_ids)
    status = {node_id: MISSING for node_id in wanted}
    for word, rest in summary_lines(output):
        node_id = node_id_of(rest, wanted)
        if node_id is not None:
            status[node_id] = word
    return status


def suite_status(output: str) -> Dict[str, str]:
    """Node id -> status of every test in the summary, when the ids are not known beforehand (a
    whole suite's run): the id is the part before the first " - "."""
    return {rest.split(" - ", 1)[0]: word for word, rest in summary_lines(output)}
