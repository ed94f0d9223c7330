"""SWE-bench's grading rule: resolved iff every FAIL_TO_PASS and PASS_TO_PASS test passed and the run exited 0."""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Dict

from envs.outcomes import InfraError, InfraSource
from envs.pytest_summary import PASSED, parse_test_status
from envs.sandbox import Sandbox
from envs.tasks import Task


@dataclass
class GradeResult:
    resolved: bool
    # Node id -> PASSED | FAILED | ERROR | SKIPPED | XFAIL | XPASS | MISSING, for every listed test.
    test_status: Dict[str, str]
    exit_code: int
    output: str


TEST_PATCH_FILE = ".swerve-test.patch"


def patched_files(diff: str) -> list[str]:
    """Paths a unified diff writes (its `+++ b/...` lines), in order, without duplicates."""
    files = []
    for line in diff.splitlines():
        if line.startswith("+++ ") and not line.startswith("+++ /dev/null"):
            path = line[4:].split("\t", 1)[0].strip()
            files.append(path[2:] if path.startswith("b/") else path)
    return list(dict.fromkeys(files))


def _apply_test_patch(sandbox: Sandbox, task: Task, timeout_s: float) -> None:
    """SWE-bench's order: test files back to the repository's HEAD (or removed when new), then test_patch."""
    restore = "; ".join(
        f"git checkout -q HEAD -- {shlex.quote(f)} 2>/dev/null || rm -f {shlex.quote(f)}"
        for f in patched_files(task.test_patch)
    )
    sandbox.write_file(TEST_PATCH_FILE, task.test_patch)
    result = sandbox.exec(f"{restore}; git apply {TEST_PATCH_FILE}; status=$?; rm -f {TEST_PATCH_FILE}; exit $status",
                          timeout_s=timeout_s)
    if result.exit_code != 0:
        raise InfraError(InfraSource.GRADER, f"test_patch of {task.id} does not apply: {result.output[-1000:]}")


def grade(sandbox: Sandbox, task: Task, timeout_s: float) -> GradeResult:
    tests = list(dict.fromkeys(task.fail_to_pass + task.pass_to_pass))
    command = " ".join([task.test_command, *(shlex.quote(node_id) for node_id in tests)])
    try:
        for path, content in task.test_files:
            sandbox.write_file(path, content)
        if task.test_patch:
            _apply_test_patch(sandbox, task, timeout_s)
        result = sandbox.exec(command, timeout_s=timeout_s)
    except InfraError as error:
        raise InfraError(InfraSource.GRADER, f"grading {task.id}: {error}") from error
    # A test run that times out is the agent's doing (e.g. an edit that loops forever), as in
    # SWE-bench: it scores unresolved rather than being excluded as an infra error.
    status = parse_test_status(result.output, tests)
    resolved = result.exit_code == 0 and all(status[node_id] == PASSED for node_id in tests)
    return GradeResult(resolved=resolved, test_status=status, exit_code=result.exit_code, output=result.output)
