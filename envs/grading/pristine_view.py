"""Grading on a pristine view: the task's own workspace plus only the change the task allows.

At the end of an episode the agent's change is read (envs/grading/workspace_change.py), split by the
task format's protection policy (envs/grading/protection.py), the workspace is reset, and only the
allowed part is written back before the task's tests run. So a conftest.py, a pytest.ini,
a .pth file, a planted `pytest.py` or an edited test never reaches the graded run: what it
would have done cannot happen, and that it was tried is recorded (`tampered`). The unified
diff of the allowed part is the attempt's `model_patch`, exactly what was graded.
"""
from __future__ import annotations

import difflib
import logging
import shlex
from dataclasses import dataclass, field
from typing import Dict, Optional

from configs.schema import SandboxConfig, SWEEnvConfig
from envs.grading import harbor_verifier
from envs.grading.grader import GradeResult, grade, grader_written_paths, scratch_paths
from envs.outcomes import ActorLost, InfraError, InfraSource, LeaseLost, WorkspaceError
from envs.grading.protection import classify, is_tool_output, local_modules, source_reason
from envs.sandboxes.sandbox import Sandbox, command_line_chunks
from envs.tasks.task import Task
from envs.grading.workspace_change import Change, ListingError, Manifest, diff_manifests, take_manifest

log = logging.getLogger(__name__)

PRISTINE_ALTERED = "<pristine copy>"


@dataclass
class CapturedChange:
    # Allowed writes (path -> new content), allowed deletions, and the unified diff of both.
    written: Dict[str, str]
    deleted: tuple[str, ...]
    model_patch: str
    # Protected path -> why; non-empty means the attempt tampered.
    tampered: Dict[str, str] = field(default_factory=dict)
    executable: frozenset[str] = frozenset()
    # Written paths that are folders in the pristine workspace (all their files deleted): the
    # folder goes before the file is written.
    replaced_folders: tuple[str, ...] = ()
    # Why what the agent left cannot be graded (beyond env.swe's bounds, a file where grading
    # needs a folder, a workspace cleanup could not reset): unresolved, never an infra error.
    refused: str = ""


@dataclass
class Verdict:
    resolved: bool
    change: CapturedChange
    # None when the attempt scored 0 without running the tests (tampering, a refused change).
    result: Optional[GradeResult] = None
    # Why an attempt is unresolved without a test verdict: the change's refusal, or what
    # grading met that the change caused (a test_patch it breaks).
    reason: str = ""


def take_change_and_reset(sandbox: Sandbox, task: Task, pristine: Manifest, swe: SWEEnvConfig) -> CapturedChange:
    """Read the agent's change, then reset the workspace to its pristine state.

    Everything here is bounded by env.swe (entries, depth, path bytes, file and change bytes):
    what the agent left beyond them is refused, never read. The reset workspace is checked
    against the manifest taken at the episode's start: a backend whose pristine copy lives
    inside the sandbox (docker, e2b) could otherwise be handed a copy the agent altered."""
    try:
        now = take_manifest(sandbox, swe)
    except ListingError as error:
        # The agent made its workspace unlistable: its doing, so it scores 0 rather than
        # becoming an infra error that training skips.
        return _refused(sandbox, task, f"the workspace cannot be listed: {error}")
    change = diff_manifests(pristine, now)
    tampered = classify(change.paths, change.symlinks, task)
    tampered.update({path: f"unreadable to the listing ({now.entries[path][1]})" for path in change.unreadable})
    carried = [path for path in change.written if path not in tampered and not is_tool_output(path)]
    deleted = tuple(path for path in change.deleted if path not in tampered and not is_tool_output(path))
    refused = _beyond_bounds(change, carried, now, swe) or conflicts(pristine, carried, deleted, task)
    if refused:
        return _refused(sandbox, task, refused, tampered)
    written = sandbox.read_files(carried)
    executable = {path for path in written if now.entries[path][1].endswith("x")}
    refused = reset_or_replace(sandbox, task)
    if refused:
        return CapturedChange(written={}, deleted=(), model_patch="", tampered=tampered, refused=refused)
    altered = _differences(pristine, sandbox, swe)
    if altered:
        tampered[PRISTINE_ALTERED] = f"the reset workspace differs from the start: {altered}"
    old = sandbox.read_files([path for path in [*written, *deleted] if path in pristine.entries])
    modules = local_modules(pristine.entries)
    for path in list(written):
        reason = source_reason(path, old.get(path), written[path], task, modules)
        if reason:
            tampered[path] = reason
            del written[path]
    patch = "".join(file_diff(path, old.get(path), written.get(path)) for path in sorted([*written, *deleted]))
    folders = _folders(pristine.entries)
    return CapturedChange(written=written, deleted=deleted, model_patch=patch, tampered=tampered,
                          executable=frozenset(executable & set(written)),
                          replaced_folders=tuple(path for path in written if path in folders))


def _refused(sandbox: Sandbox, task: Task, reason: str, tampered: Optional[Dict[str, str]] = None) -> CapturedChange:
    reset_failure = reset_or_replace(sandbox, task)
    return CapturedChange(written={}, deleted=(), model_patch="", tampered=dict(tampered or {}),
                          refused="; ".join(filter(None, [reason, reset_failure])))


def reset_or_replace(sandbox: Sandbox, task: Task) -> str:
    """Reset the workspace; when what the agent left defeats the reset, the sandbox is replaced
    by a fresh lease on the same task and the attempt is refused ("" when the reset worked): a
    restore the backend could not complete is blamed on what the agent left, since a fresh lease
    on the same task works. A sandbox actor that died or missed its deadline (ActorLost), a lease
    that died (LeaseLost: its container killed, its VM gone) or a fresh lease that cannot start is
    the machinery's failure: raised, never the agent's 0."""
    try:
        sandbox.reset()
        return ""
    except (ActorLost, LeaseLost):
        raise
    except Exception as error:  # noqa: BLE001 - whatever the agent left, the lease is replaced below
        log.warning("reset of %s failed (%s: %s): replacing its sandbox", task.id, type(error).__name__, error)
        sandbox.close()
        sandbox.start(task)
        return f"the workspace could not be reset ({type(error).__name__}: {str(error)[:300]}); the sandbox was replaced"


def _beyond_bounds(change: Change, carried: list[str], now: Manifest, swe: SWEEnvConfig) -> str:
    """Why the change is too big to read back ("" if it is not): no fix needs it, and reading it
    would cost the host its size in memory."""
    if change.oversized:
        return (f"{change.oversized[0]} is larger than env.swe.max_file_bytes={swe.max_file_bytes}"
                f"{f' (and {len(change.oversized) - 1} more)' if len(change.oversized) > 1 else ''}")
    if len(carried) + len(change.deleted) > swe.max_changed_files:
        return f"{len(carried) + len(change.deleted)} changed files, more than env.swe.max_changed_files={swe.max_changed_files}"
    total = sum(now.sizes.get(path, 0) for path in carried)
    if total > swe.max_change_bytes:
        return f"{total} changed bytes, more than env.swe.max_change_bytes={swe.max_change_bytes}"
    return ""


def conflicts(pristine: Manifest, written: list[str], deleted: tuple[str, ...], task: Task) -> str:
    """Why the change cannot be laid over the pristine workspace and the task's test files ("" if
    it can): a path written where a kept file is a folder on the way, or a folder where a kept
    file or a file grading writes is. The agent can make either (a file replaced by a folder)."""
    gone = set(deleted)
    files = {path for path in pristine.entries if path not in gone} | set(written)
    folders = _folders(files)
    # Grading writes its scratch files into the workspace (the test_patch, the supervisor's input):
    # a folder of the agent's there would fail that write (IsADirectoryError) after the change was laid.
    for path in [*written, *grader_written_paths(task), *scratch_paths(task)]:
        if path in folders:
            return f"{path} is a file in the change but a folder in the graded view"
        clash = next((parent for parent in _parents(path) if parent in files), None)
        if clash:
            return f"{path} needs {clash} to be a folder, but it is a file in the graded view"
    return ""


def _folders(paths) -> set[str]:
    """Every folder on the way to any of `paths`."""
    return {parent for path in paths for parent in _parents(path)}


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _differences(pristine: Manifest, sandbox: Sandbox, swe: SWEEnvConfig) -> str:
    """How the freshly reset workspace differs from the listing taken at the start ("" if not)."""
    try:
        now = take_manifest(sandbox, swe)
    except ListingError as error:
        return str(error)
    if now == pristine:
        return ""
    return str(sorted(set(diff_manifests(pristine, now).paths) | set(diff_manifests(now, pristine).paths))[:5])


def grade_on_pristine(sandbox: Sandbox, task: Task, pristine: Manifest, swe: SWEEnvConfig,
                      sandbox_cfg: SandboxConfig) -> Verdict:
    """The attempt's verdict: its allowed change applied to the pristine workspace, then graded
    (by the SWE-bench rule, or a Harbor task's verifier, which may need sandbox_cfg's docker for
    a container of its own). With swe.tamper_scores_zero a tampering attempt is unresolved
    without running the tests; an altered pristine copy, an unlistable workspace or a refused
    change always is."""
    change = take_change_and_reset(sandbox, task, pristine, swe)
    if change.refused:
        return Verdict(resolved=False, change=change, reason=change.refused)
    # Without a trustworthy pristine view there is nothing honest to grade, whatever the switch.
    if change.tampered and (swe.tamper_scores_zero or PRISTINE_ALTERED in change.tampered):
        return Verdict(resolved=False, change=change)
    try:
        apply_change(sandbox, change)
        result = _grade(sandbox, task, swe, sandbox_cfg, tuple(change.written))
    except InfraError as error:
        raise InfraError(InfraSource.GRADER, f"grading {task.id}'s graded view: {error}") from error
    except WorkspaceError as error:
        return Verdict(resolved=False, change=change, reason=_blame(sandbox, task, swe, sandbox_cfg, error))
    return Verdict(resolved=result.resolved, change=change, result=result)


def _grade(sandbox: Sandbox, task: Task, swe: SWEEnvConfig, sandbox_cfg: SandboxConfig,
           changed: tuple[str, ...] = ()) -> GradeResult:
    if task.harbor is not None:
        return harbor_verifier.verify(sandbox, task, swe, sandbox_cfg)
    return grade(sandbox, task, swe.grade_timeout_s, swe.grade_isolation, changed)


def _blame(sandbox: Sandbox, task: Task, swe: SWEEnvConfig, sandbox_cfg: SandboxConfig, error: WorkspaceError) -> str:
    """The reason an attempt is unresolved when grading its view failed: the change's doing when
    the pristine workspace grades without that failure, else the task is broken (InfraError,
    so the task is re-run and, failing again, quarantined; `swerve tasks validate` names it)."""
    sandbox.reset()
    try:
        _grade(sandbox, task, swe, sandbox_cfg)
    except WorkspaceError as pristine_error:
        raise InfraError(InfraSource.GRADER, f"{task.id} cannot be graded even unchanged: {pristine_error}") from error
    return f"the change breaks grading: {error}"


def apply_change(sandbox: Sandbox, change: CapturedChange) -> None:
    """Lay the allowed change over the reset workspace: deletions first, then the folders that
    become files, then the writes (a file that became a folder, or the reverse, lands whole).
    `conflicts` ruled out every clash the change could cause, so a failure here is the machinery's."""
    _in_chunks(sandbox, "rm -f --", list(change.deleted))
    _in_chunks(sandbox, "rm -rf --", list(change.replaced_folders))
    sandbox.write_files(change.written)
    _in_chunks(sandbox, "chmod +x --", sorted(change.executable))


def _in_chunks(sandbox: Sandbox, command: str, paths: list[str]) -> None:
    """`command` over `paths`, a bounded number per call: thousands of paths fit no command line."""
    for chunk in command_line_chunks(paths):
        # Bounded by sandbox.command_timeout_s, as any command in the sandbox.
        result = sandbox.exec(" ".join([command, *(shlex.quote(p) for p in chunk)]))
        if result.exit_code != 0:
            raise InfraError(InfraSource.GRADER, f"cannot apply the change ({command}): {result.output[-500:]}")



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
