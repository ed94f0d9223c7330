"""The sanity gate: a task is usable iff its gold patch resolves it and the empty patch does not.

Each task runs twice, each time in a fresh lease of a sandbox from `sandbox_factory`: once
with the gold patch applied (written into the workspace, applied with `patch -p1`, or
`git apply` when patch refuses it; a task whose fix is a script runs its gold_script instead),
once untouched; both are graded with the SWE-bench rule (`envs.grading.grader.grade`). Tasks that fail
are quarantined: `write_quarantine` records them (task id -> reason, plus the source) in a JSON
file written atomically, and training skips the ids `load_quarantine` returns. Tasks whose
repository lives in an image (workspace_dir == "") are checked in containers (sandbox.backend=
docker); the local sandbox cannot run them, so there they are reported "skipped" (needs a
container backend), never quarantined. An infrastructure error
while checking a task quarantines it with the error as the reason (rerun validate once fixed).
`swerve tasks validate` grades with env.swe.grade_timeout_s, the limit training grades with,
so a task passes the gate iff its suite can be graded in a run.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Union

from configs.schema import SandboxConfig, SWEEnvConfig, TasksConfig
from envs.grading.grader import GradeResult
from envs.grading.harbor_verifier import upload_files
from envs.tasks.loaders.harbor import SOLUTION_DIR
from envs.tasks.cache import cache_root
from envs.tasks.loaders import NAMED_SOURCES, load_tasks
from envs.tasks.stream_sources import open_stream
from envs.outcomes import InfraError
from envs.grading.pristine_view import grade_on_pristine
from envs.sandboxes.sandbox import Sandbox
from envs.tasks.stream import STREAM_SPLIT, TaskStream
from envs.tasks.task import Task
from envs.grading.workspace_change import take_manifest

OK, QUARANTINED, SKIPPED = "ok", "quarantined", "skipped"
NEEDS_CONTAINER = "needs container backend"
_PATCH_FILE = ".swerve-gold.patch"
_SCRIPT_FILE = ".swerve-gold.sh"
APPLY_COMMAND = (
    f"(patch -p1 --batch --forward --no-backup-if-mismatch --dry-run -i {_PATCH_FILE} >/dev/null"
    f" && patch -p1 --batch --forward --no-backup-if-mismatch -i {_PATCH_FILE})"
    f" || git apply --whitespace=nowarn {_PATCH_FILE}"
)


@dataclass
class ValidationResult:
    task_id: str
    repo: str
    verdict: str  # "ok" | "quarantined" | "skipped"
    reason: str
    # Whether the gold / empty patch resolved the task; None when that run did not happen.
    gold_resolved: Optional[bool]
    empty_resolved: Optional[bool]
    seconds: float


def _failing(result: GradeResult) -> str:
    bad = [f"{node_id} {status}" for node_id, status in sorted(result.test_status.items()) if status != "PASSED"]
    bad += [f"{label} {status}" for label, status in sorted(result.hidden_status.items()) if status != "PASSED"]
    bad += result.problems
    shown = ", ".join(bad[:3]) + (f" (+{len(bad) - 3} more)" if len(bad) > 3 else "")
    return f"exit {result.exit_code}" + (f"; {shown}" if shown else "")


def _apply_gold(sandbox: Sandbox, task: Task, timeout_s: float) -> Optional[str]:
    """Apply the gold fix; the reason it could not be applied, or None."""
    if task.gold_patch:
        sandbox.write_files({_PATCH_FILE: task.gold_patch})
        result = sandbox.exec(APPLY_COMMAND, timeout_s=timeout_s)
        sandbox.exec(f"rm -f {_PATCH_FILE}", timeout_s=timeout_s)
        what = "gold patch does not apply"
    elif task.gold_files:  # Harbor's oracle: the whole solution/ at /solution, solve.sh run from the workspace
        upload_files(sandbox, SOLUTION_DIR, task.gold_files)
        result = sandbox.exec(task.gold_script, timeout_s=task.agent_timeout_s or timeout_s)
        sandbox.exec(f"rm -rf {SOLUTION_DIR}/*", timeout_s=timeout_s)
        what = "gold script fails"
    else:
        sandbox.write_files({_SCRIPT_FILE: task.gold_script})
        result = sandbox.exec(f"bash {_SCRIPT_FILE}", timeout_s=timeout_s)
        sandbox.exec(f"rm -f {_SCRIPT_FILE}", timeout_s=timeout_s)
        what = "gold script fails"
    if result.exit_code != 0:
        tail = " ".join(result.output.strip().splitlines()[-2:])[-200:]
        return f"{what} (exit {result.exit_code}): {tail}"
    return None


def validate_task(task: Task, sandbox_factory: Callable[[], Sandbox], timeout_s: float,
                  listing_timeout_s: float, sandbox_cfg: SandboxConfig, runs_images: bool = False) -> ValidationResult:
    """`runs_images`: the factory's sandboxes are containers, so tasks whose repository lives in
    an image are checked too (else reported skipped). sandbox_cfg: what a Harbor task's separate
    verifier container is made with (the factory's own settings)."""
    started = time.monotonic()
    listing = SWEEnvConfig(listing_timeout_s=listing_timeout_s, grade_timeout_s=timeout_s)

    def done(verdict: str, reason: str, gold: Optional[bool] = None, empty: Optional[bool] = None):
        return ValidationResult(task.id, task.repo, verdict, reason, gold, empty, round(time.monotonic() - started, 2))

    if not task.workspace_dir and not (runs_images and task.image):
        return done(SKIPPED, f"{NEEDS_CONTAINER} (image {task.image or '?'})")
    if not task.gold_patch and not task.gold_script:
        return done(QUARANTINED, "no gold patch to check the task with")
    sandbox = sandbox_factory()
    try:
        # Both graded as an agent's attempt is: on the pristine view (envs/grading/pristine_view.py).
        sandbox.start(task)
        pristine = take_manifest(sandbox, listing)
        failure = _apply_gold(sandbox, task, timeout_s)
        if failure:
            return done(QUARANTINED, failure, gold=False)
        verdict = grade_on_pristine(sandbox, task, pristine, listing, sandbox_cfg)
        if verdict.reason:
            return done(QUARANTINED, f"gold fix cannot be graded: {verdict.reason}", gold=False)
        if verdict.change.tampered:
            return done(QUARANTINED, f"gold fix changes protected paths: {verdict.change.tampered}", gold=False)
        gold = verdict.result
        sandbox.start(task)  # a fresh lease for the empty patch
        empty = grade_on_pristine(sandbox, task, take_manifest(sandbox, listing), listing, sandbox_cfg).result
    except InfraError as error:
        return done(QUARANTINED, str(error))
    finally:
        sandbox.close()
    if not gold.resolved:
        return done(QUARANTINED, f"gold patch does not resolve: {_failing(gold)}", gold.resolved, empty.resolved)
    if empty.resolved:
        return done(QUARANTINED, "empty patch already resolves the task", gold.resolved, empty.resolved)
    return done(OK, "", gold.resolved, empty.resolved)


def quarantine_path(cfg_tasks: TasksConfig) -> Path:
    """tasks.quarantine_file, else ~/.cache/swerve/quarantine/<hash of the source>.json."""
    if cfg_tasks.quarantine_file:
        return Path(cfg_tasks.quarantine_file).expanduser()
    source = cfg_tasks.source
    key = source if source in NAMED_SOURCES else str(Path(source).expanduser().resolve())
    return cache_root() / "quarantine" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def _read(path: Path) -> dict:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("tasks", {}), dict):
        raise ValueError(f"quarantine file {path} is not a JSON object with a 'tasks' object")
    return data


def load_quarantine(cfg_tasks: TasksConfig) -> Dict[str, str]:
    """Task id -> reason for every quarantined task of the configured source ({} if none)."""
    return dict(_read(quarantine_path(cfg_tasks)).get("tasks", {}))


def write_quarantine(path: Path, source: str, results: Iterable[ValidationResult]) -> Dict[str, str]:
    """Merge these results into the quarantine file (atomically); returns every quarantined id -> reason.

    Tasks checked now are added (quarantined) or removed (ok); entries of tasks not checked
    (other splits or ids) are kept; skipped tasks change nothing.
    """
    tasks = dict(_read(path).get("tasks", {}))
    for result in results:
        if result.verdict == QUARANTINED:
            tasks[result.task_id] = result.reason
        elif result.verdict == OK:
            tasks.pop(result.task_id, None)
    payload = {"source": source, "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "tasks": dict(sorted(tasks.items()))}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(payload, handle, indent=2)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tasks


def trainable_tasks(cfg_tasks: TasksConfig) -> tuple[Union[List[Task], TaskStream], Dict[str, str]]:
    """The configured tasks minus those the sanity gate quarantined (returned with their reasons);
    for tasks.split=stream, the source's endless stream (its tasks are new: none was validated)."""
    if cfg_tasks.split == STREAM_SPLIT:
        return open_stream(cfg_tasks), {}
    tasks = load_tasks(cfg_tasks.source, cfg_tasks.split, cfg_tasks.ids, cfg_tasks.format)
    quarantine = load_quarantine(cfg_tasks)
    skipped = {task.id: quarantine[task.id] for task in tasks if task.id in quarantine}
    kept = [task for task in tasks if task.id not in quarantine]
    if tasks and not kept:
        raise ValueError(
            f"every one of the {len(tasks)} tasks is quarantined by {quarantine_path(cfg_tasks)}; "
            "fix them and rerun `swerve tasks validate`, or pick another tasks.source / tasks.split"
        )
    return kept, skipped
