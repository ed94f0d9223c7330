"""The built-in suite as SWE-bench-style image tasks: what a user with SWE-bench rows runs, here.

Each repository of `envs/tasks/builtin/repos/` becomes an image `swerve-task/<repo>:<hash>` on the base
image (envs/sandboxes/docker_engine.py): its code at /testbed, no version-control history, and none of
its tests (they reach the container only at grading, through the row's `test_patch`, as in
SWE-bench). Each task is a thin image on top holding that task's buggy file, tagged
`swerve-task/<repo>:<task id>-<hash>`. The rows (`envs/tasks/builtin/image_tasks.jsonl`) are in
SWE-bench's format plus `image_name`, and load with `--source` like any SWE-bench file.

    python -m envs.image_suite rows     # rewrite the shipped rows (after the suite changed)
    python -m envs.image_suite build    # build every image the rows name (make docker)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from envs.tasks.builtin.suite import REPOS_DIR, SUITE_DIR, repo_files
from envs.sandboxes.docker_engine import CACHE_LABEL, base_image_tag, image_exists
from envs.grading.grader import patched_files
from envs.tasks.loaders import load_tasks
from envs.grading.pristine_view import file_diff
from envs.tasks.task import HiddenCase, Task

ROWS_FILE = SUITE_DIR / "image_tasks.jsonl"
REPOSITORY = "swerve-task"
WORKDIR = "/testbed"
BUILD_TIMEOUT_S = 600.0


def _hash(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:12]


def _repo_name(task: Task) -> str:
    return task.repo.rsplit("/", 1)[-1]


def _repo_code(name: str, tests: set[str]) -> dict[str, bytes]:
    """The repository's files without its tests (path -> content)."""
    repo_dir = REPOS_DIR / name
    return {str(path): (repo_dir / path).read_bytes() for path in repo_files(repo_dir) if str(path) not in tests}


def _tests_of(tasks: Sequence[Task]) -> set[str]:
    return {path for task in tasks for path, _ in task.test_files}


def _files_hash(on: str, files: dict[str, bytes]) -> str:
    return _hash(on.encode(), *(path.encode() + b"\0" + content for path, content in sorted(files.items())))


def repo_image_tag(name: str, code: dict[str, bytes]) -> str:
    return f"{REPOSITORY}/{name}:{_files_hash(base_image_tag(), code)}"


def task_image_tag(repo_tag: str, task: Task, buggy: dict[str, bytes]) -> str:
    return f"{repo_tag.rsplit(':', 1)[0]}:{task.id}-{_files_hash(repo_tag, buggy)}"


def _buggy_files(task: Task) -> dict[str, bytes]:
    """The files the task's bug lives in (those its fix touches), as the task's workspace has them."""
    return {path: (Path(task.workspace_dir) / path).read_bytes() for path in patched_files(task.gold_patch)}


def hidden_entry(case: HiddenCase) -> dict:
    """A hidden case as a row carries it (the SWE-smith loader's format): the call and its expected
    value, and only those of the method, attribute and exception fields that are set."""
    entry = {"module": case.module, "function": case.function, "args_json": case.args_json,
             "expected_json": case.expected_json}
    optional = {"init_json": case.init_json, "steps_json": case.steps_json, "result_attrs": list(case.result_attrs),
                "objects": case.objects, "raises": case.raises}
    entry.update({key: value for key, value in optional.items() if value})
    return entry


def _test_patch(task: Task) -> str:
    return "".join(file_diff(path, None, content) for path, content in sorted(task.test_files))


def plan(tasks: Optional[Sequence[Task]] = None) -> list[tuple[dict, str, dict[str, bytes], str, dict[str, bytes]]]:
    """(row, repo image tag, repo code, task image tag, buggy files) for every built-in task."""
    tasks = list(tasks if tasks is not None else load_tasks("builtin", "all"))
    by_repo: dict[str, list[Task]] = {}
    for task in tasks:
        by_repo.setdefault(_repo_name(task), []).append(task)
    out = []
    for name, repo_tasks in sorted(by_repo.items()):
        code = _repo_code(name, _tests_of(repo_tasks))
        repo_tag = repo_image_tag(name, code)
        for task in repo_tasks:
            buggy = _buggy_files(task)
            tag = task_image_tag(repo_tag, task, buggy)
            row = {"instance_id": task.id, "repo": task.repo, "base_commit": tag.rsplit(":", 1)[1],
                   "problem_statement": task.problem_statement, "patch": task.gold_patch,
                   "test_patch": _test_patch(task), "FAIL_TO_PASS": list(task.fail_to_pass),
                   "PASS_TO_PASS": list(task.pass_to_pass), "stratum": task.stratum, "split": task.split,
                   "image_name": tag, "hidden_cases": [hidden_entry(case) for case in task.hidden_cases]}
            out.append((row, repo_tag, code, tag, buggy))
    return out


def rows() -> list[dict]:
    return [row for row, *_ in plan()]


def write_rows(path: Path = ROWS_FILE) -> Path:
    path.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows()))
    return path


def _build(tag: str, base: str, files: dict[str, bytes]) -> None:
    """`docker build` of `FROM base` plus these files under /testbed (owned by root; the sandbox
    hands the workspace to its user at start)."""
    with tempfile.TemporaryDirectory(prefix="swerve-image-") as context:
        for path, content in files.items():
            target = Path(context, "files", path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        Path(context, "files").mkdir(exist_ok=True)
        Path(context, "Dockerfile").write_text(
            f"FROM {base}\nCOPY files/ {WORKDIR}/\nWORKDIR {WORKDIR}\nLABEL {CACHE_LABEL}=task-image\n")
        built = subprocess.run(["docker", "build", "-q", "-t", tag, context], capture_output=True, text=True,
                               timeout=BUILD_TIMEOUT_S)
    if built.returncode != 0:
        raise RuntimeError(f"docker build of {tag} failed: {built.stderr[-2000:]}")


def build(ids: Sequence[str] = ()) -> list[str]:
    """Build the images of these tasks (all when empty) that the engine lacks; their tags."""
    base = base_image_tag()
    if not image_exists(base):
        raise RuntimeError(f"the base image {base} is missing: run make docker (python -m envs.sandboxes.docker_engine "
                           "base-image)")
    tags = []
    for row, repo_tag, code, tag, buggy in plan():
        if ids and row["instance_id"] not in ids:
            continue
        if not image_exists(repo_tag):
            _build(repo_tag, base, code)
        if not image_exists(tag):
            _build(tag, repo_tag, buggy)
        tags.append(tag)
    return tags


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.image_suite", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("rows", "build"))
    parser.add_argument("--ids", nargs="*", default=[], help="task ids to build (default: all)")
    args = parser.parse_args(argv)
    if args.action == "rows":
        print(write_rows())
    else:
        print("\n".join(build(args.ids)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
