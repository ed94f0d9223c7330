"""Grading on a pristine view: the task's own workspace plus only the change the task allows.

At the end of an episode the agent's change is read (envs/workspace_change.py), split by the
task format's protection policy (envs/protection.py), the workspace is reset, and only the
allowed part is written back before the task's tests run. So a conftest.py, a pytest.ini,
a .pth file, a planted `pytest.py` or an edited test never reaches the graded run: what it
would have done cannot happen, and that it was tried is recorded (`tampered`). The unified
diff of the allowed part is the attempt's `model_patch`, exactly what was graded.
"""
from __future__ import annotations

import difflib
import shlex
from dataclasses import dataclass, field
from typing import Dict, Optional

from envs.grader import GradeResult, grade
from envs.outcomes import InfraError, InfraSource
from envs.protection import classify, is_tool_output, source_reason
from envs.sandbox import Sandbox
from envs.tasks import Task
from envs.workspace_change import ListingError, Manifest, diff_manifests, take_manifest

PRISTINE_ALTERED = "<pristine copy>"
WORKSPACE = "<workspace>"


@dataclass
class CapturedChange:
    # Allowed writes (path -> new content), allowed deletions, and the unified diff of both.
    written: Dict[str, str]
    deleted: tuple[str, ...]
    model_patch: str
    # Protected path -> why; non-empty means the attempt tampered.
    tampered: Dict[str, str] = field(default_factory=dict)
    executable: frozenset[str] = frozenset()


@dataclass
class Verdict:
    resolved: bool
    change: CapturedChange
    # None when a tampering attempt scored 0 without running the tests.
    result: Optional[GradeResult] = None


def capture_change(sandbox: Sandbox, task: Task, pristine: Manifest, listing_timeout_s: float) -> CapturedChange:
    """Read the agent's change, then reset the workspace to its pristine state.

    The reset workspace is checked against the manifest taken at the episode's start: a
    backend whose pristine copy lives inside the sandbox (docker, e2b) could otherwise be
    handed a copy the agent altered."""
    try:
        now = take_manifest(sandbox, listing_timeout_s)
    except ListingError as error:
        # The agent made its workspace unlistable (a flood of files): its doing, so it scores
        # 0 like any tampering rather than becoming an infra error that training skips.
        sandbox.reset()
        return CapturedChange(written={}, deleted=(), model_patch="", tampered={WORKSPACE: str(error)})
    change = diff_manifests(pristine, now)
    tampered = classify(change.paths, change.symlinks, task)
    tampered.update({path: "unreadable to the listing (permissions changed)" for path in change.unreadable})
    carried = [path for path in change.written if path not in tampered and not is_tool_output(path)]
    written = {path: sandbox.read_file(path) for path in carried}
    deleted = tuple(path for path in change.deleted if path not in tampered and not is_tool_output(path))
    executable = {path for path in written if now.entries[path][1].endswith("x")}
    sandbox.reset()
    altered = _differences(pristine, sandbox, listing_timeout_s)
    if altered:
        tampered[PRISTINE_ALTERED] = f"the reset workspace differs from the start: {altered}"
    old = {path: sandbox.read_file(path) for path in [*written, *deleted] if path in pristine.entries}
    for path in list(written):
        reason = source_reason(path, old.get(path), written[path], task)
        if reason:
            tampered[path] = reason
            del written[path]
    patch = "".join(file_diff(path, old.get(path), written.get(path)) for path in sorted([*written, *deleted]))
    return CapturedChange(written=written, deleted=deleted, model_patch=patch, tampered=tampered,
                          executable=frozenset(executable & set(written)))


def _differences(pristine: Manifest, sandbox: Sandbox, listing_timeout_s: float) -> str:
    """How the freshly reset workspace differs from the listing taken at the start ("" if not)."""
    try:
        now = take_manifest(sandbox, listing_timeout_s)
    except ListingError as error:
        return str(error)
    if now == pristine:
        return ""
    return str(sorted(set(diff_manifests(pristine, now).paths) | set(diff_manifests(now, pristine).paths))[:5])


def grade_on_pristine(sandbox: Sandbox, task: Task, pristine: Manifest, timeout_s: float, listing_timeout_s: float,
                      tamper_scores_zero: bool = True) -> Verdict:
    """The attempt's verdict: its allowed change applied to the pristine workspace, then graded.
    With `tamper_scores_zero` a tampering attempt is unresolved without running the tests; an
    altered pristine copy or an unlistable workspace always is."""
    change = capture_change(sandbox, task, pristine, listing_timeout_s)
    # Without a trustworthy pristine view there is nothing honest to grade, whatever the switch.
    untrusted = PRISTINE_ALTERED in change.tampered or WORKSPACE in change.tampered
    if change.tampered and (tamper_scores_zero or untrusted):
        return Verdict(resolved=False, change=change)
    try:
        apply_change(sandbox, change)
    except InfraError as error:
        raise InfraError(InfraSource.GRADER, f"rebuilding {task.id}'s graded view: {error}") from error
    result = grade(sandbox, task, timeout_s)
    return Verdict(resolved=result.resolved, change=change, result=result)


def apply_change(sandbox: Sandbox, change: CapturedChange) -> None:
    for path, content in change.written.items():
        sandbox.write_file(path, content)
    commands = [f"chmod +x -- {shlex.quote(path)}" for path in sorted(change.executable)]
    commands += [f"rm -f -- {shlex.quote(path)}" for path in change.deleted]
    if commands:
        result = sandbox.exec(" && ".join(commands), timeout_s=60.0)
        if result.exit_code != 0:
            raise InfraError(InfraSource.GRADER, f"cannot apply the change: {result.output[-500:]}")


def file_diff(path: str, old: Optional[str], new: Optional[str]) -> str:
    """One file's `git diff`-style chunk (a/ b/ prefixes, /dev/null for a created or deleted
    file); "" when the contents are equal."""
    a = f"a/{path}" if old is not None else "/dev/null"
    b = f"b/{path}" if new is not None else "/dev/null"
    lines = difflib.unified_diff((old or "").splitlines(keepends=True), (new or "").splitlines(keepends=True), a, b)
    body = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    # git apply needs the mode line to create or delete a file under a `diff --git` header.
    mode = "new file mode 100644\n" if old is None else "deleted file mode 100644\n" if new is None else ""
    return f"diff --git a/{path} b/{path}\n{mode}{body}" if body else ""
