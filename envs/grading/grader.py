"""SWE-bench's grading rule, read through a channel the tested code does not write.

Resolved iff every FAIL_TO_PASS and PASS_TO_PASS test passed, the run exited 0 and every hidden
case (Task.hidden_cases) returned its expected value. The hidden cases run first, before any test,
apart (envs/grading/hidden_run.py). For a pytest test command each listed test's status comes from the
grader's own plugin (envs/grading/grade_report.py) through a pipe of the grading supervisor's
(envs/grading/grade_supervisor.py, read back by envs/grading/reported_run.py), is cross-checked
against the run's exit code and the plugin's check that pytest's machinery is intact; the tested
process's output is only shown, never parsed. So printing "PASSED <id>" lines, faking a summary,
exiting 0 early or rewriting a result file cannot pass: a report that is missing, doubled, for
other tests, contradicting the exit code or sent beside another writer is a failure. A test
command that is not a plain pytest call is graded by its exit code and the `-rA` summary. Test
ids always travel in a file: a SWE-bench row may list thousands.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, get_args

from configs.schema.env import GradeIsolation
from envs.grading import reported_run
from envs.grading.hidden_run import hidden_spec
from envs.grading.reported_run import GRADING_MARK, SHOWN_OUTPUT_BYTES
from envs.tasks.hidden_cases import PASSED as CASE_PASSED
from envs.tasks.hidden_cases import compare
from envs.outcomes import InfraError, InfraSource, WorkspaceError
from envs.tasks.pytest_summary import MISSING, PASSED, parse_test_status
from envs.sandboxes.sandbox import Sandbox
from envs.tasks.task import Task


@dataclass
class GradeResult:
    resolved: bool
    # Node id -> PASSED | FAILED | ERROR | SKIPPED | XFAIL | XPASS | MISSING, for every listed test.
    test_status: Dict[str, str]
    exit_code: int
    output: str
    # Hidden case label -> PASSED or "FAILED (why)"; empty for a task without hidden cases.
    hidden_status: Dict[str, str] = field(default_factory=dict)
    # Why the report could not be trusted (missing, duplicated, contradicting the exit code), or
    # why a Harbor verifier's reward is 0 without its saying so.
    problems: List[str] = field(default_factory=list)
    # A Harbor verifier's reward (fractional rewards kept; resolved iff >= 1); None: 1 iff resolved.
    reward: Optional[float] = None

    @property
    def score(self) -> float:
        if self.reward is not None:
            return self.reward
        return 1.0 if self.resolved else 0.0


TEST_PATCH_FILE = ".swerve-test.patch"
IDS_FILE = ".swerve-grade-ids.txt"
GRADE_ISOLATION = get_args(GradeIsolation)
_SHELL_OPERATORS = re.compile(r"[;&|<>`$()]")
__all__ = ["GRADING_MARK", "SHOWN_OUTPUT_BYTES", "GradeResult", "grade", "grader_written_paths", "patched_files"]


def patched_files(diff: str) -> list[str]:
    """Paths a unified diff writes (its `+++ b/...` lines), in order, without duplicates."""
    files = []
    for line in diff.splitlines():
        if line.startswith("+++ ") and not line.startswith("+++ /dev/null"):
            path = line[4:].split("\t", 1)[0].strip()
            files.append(path[2:] if path.startswith("b/") else path)
    return list(dict.fromkeys(files))


def grader_written_paths(task: Task) -> list[str]:
    """Workspace paths grading writes over whatever the agent left: test files and test_patch targets."""
    return list(dict.fromkeys([path for path, _ in task.test_files] + patched_files(task.test_patch)))


def scratch_paths(task: Task) -> list[str]:
    """Workspace files grading writes for its own use (the test_patch before `git apply`, the
    supervisor's input or the ids file): a folder of the agent's there would fail that write."""
    return ([TEST_PATCH_FILE] if task.test_patch else []) + [
        reported_run.INPUT_FILE if reports_per_test(task.test_command) else IDS_FILE]


def reports_per_test(command: str) -> bool:
    """Whether the test command is one plain pytest call, so the grader's plugin can report."""
    words = command.split()
    return "pytest" in words[:4] and not _SHELL_OPERATORS.search(command)


def _apply_test_patch(sandbox: Sandbox, task: Task, timeout_s: float) -> None:
    """SWE-bench's order: test files back to the repository's HEAD (or removed when new), then
    test_patch. It does not apply: WorkspaceError (the caller tells the agent's doing from a
    broken task by trying the pristine workspace)."""
    restore = "; ".join(
        f"git checkout -q HEAD -- {shlex.quote(f)} 2>/dev/null || rm -rf -- {shlex.quote(f)}"
        for f in patched_files(task.test_patch)
    )
    sandbox.write_files({TEST_PATCH_FILE: task.test_patch})
    result = sandbox.exec(f"{restore}; git apply {TEST_PATCH_FILE}; status=$?; rm -f {TEST_PATCH_FILE}; exit $status",
                          timeout_s=timeout_s)
    if result.exit_code != 0:
        raise WorkspaceError(f"test_patch of {task.id} does not apply: {result.output[-1000:]}")


def grade(sandbox: Sandbox, task: Task, timeout_s: float, isolation: str = "suite",
          changed: Sequence[str] = ()) -> GradeResult:
    """The task's verdict on the sandbox's workspace (the graded view). `isolation`: "suite" runs
    the listed tests in one pytest process, "per_test" each in its own (env.swe.grade_isolation);
    `changed`: the workspace paths the agent changed (code from them must not be pytest's)."""
    if isolation not in GRADE_ISOLATION:
        raise ValueError(f"grade isolation {isolation!r}; allowed: {list(GRADE_ISOLATION)}")
    tests = list(dict.fromkeys(task.fail_to_pass + task.pass_to_pass))
    spec = None
    if task.hidden_cases and reports_per_test(task.test_command):
        spec = hidden_spec(task, _hidden_from_the_cases(task, tests), timeout_s)
    try:
        hidden_results = None
        if spec is not None and task.test_patch:
            # The tests arrive with the test_patch (SWE-bench's way): the hidden cases run before
            # they exist anywhere in the sandbox, in a supervised command of their own. Where the
            # tests are part of the repository (built-in, micro, synthesized), the agent saw them
            # all along, and the hidden cases run first within the graded command.
            hidden_results = reported_run.run(sandbox, [], changed, task.test_command, False, timeout_s,
                                              spec).hidden_results
            spec = None
        sandbox.write_files(dict(task.test_files))
        if task.test_patch:
            _apply_test_patch(sandbox, task, timeout_s)
        if not reports_per_test(task.test_command):
            return _grade_by_summary(sandbox, task, tests, timeout_s)
        verdict = reported_run.run(sandbox, tests, changed, task.test_command, isolation == "per_test", timeout_s,
                                   spec)
        if spec is not None:
            hidden_results = verdict.hidden_results
    except InfraError as error:
        raise InfraError(InfraSource.GRADER, f"grading {task.id}: {error}") from error
    hidden = compare(task.hidden_cases, hidden_results) if task.hidden_cases else {}
    resolved = (not verdict.problems and verdict.exit_code == 0 and all(verdict.status[t] == PASSED for t in tests)
                and all(s == CASE_PASSED for s in hidden.values()))
    shown = verdict.output + "".join(f"\ngrading: {problem}" for problem in verdict.problems)
    return GradeResult(resolved=resolved, test_status=verdict.status, exit_code=verdict.exit_code, output=shown,
                       hidden_status=hidden, problems=verdict.problems)


def _hidden_from_the_cases(task: Task, tests: Sequence[str]) -> list[str]:
    """What the hidden cases' copy of the view leaves out: every file grading writes and every
    file the listed tests live in."""
    return list(dict.fromkeys([*grader_written_paths(task), *(test.split("::", 1)[0] for test in tests)]))


def _grade_by_summary(sandbox: Sandbox, task: Task, tests: list[str], timeout_s: float) -> GradeResult:
    """A test command that is not one plain pytest call: graded by its exit code and the `-rA`
    summary. The ids come from a file, each its own argument (thousands fit no single one)."""
    sandbox.write_files({IDS_FILE: "".join(f"{test}\n" for test in tests)})
    result = sandbox.exec(f"# {GRADING_MARK}summary\nmapfile -t _swerve_ids < {IDS_FILE}; rm -f {IDS_FILE}\n"
                          f'{task.test_command} "${{_swerve_ids[@]}}"', timeout_s=timeout_s)
    # A test run that times out is the agent's doing (e.g. an edit that loops forever), as in
    # SWE-bench: it scores unresolved rather than being excluded as an infra error.
    status = parse_test_status(result.output, tests)
    resolved = result.exit_code == 0 and all(status[node_id] == PASSED for node_id in tests)
    return GradeResult(resolved=resolved, test_status=status, exit_code=result.exit_code, output=result.output)
