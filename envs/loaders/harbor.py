"""Harbor task directories -> Task.

A source is one task directory or a directory of task directories. A task directory holds
`instruction.md` (-> problem_statement), `task.toml` (read with tomllib), `environment/`
(a Dockerfile build context), `tests/test.sh` (the verifier) and optionally
`solution/solve.sh` (-> gold_script). The task id is the directory name.

From task.toml: [metadata] difficulty (-> stratum), split, repo (default "harbor/<id>");
[environment] docker_image (-> image). Without docker_image, image is
"swerve-harbor/<id>:<hash of environment/>" and build_context is environment/, which a
container backend builds from environment/Dockerfile. workspace_dir is "": Harbor tasks need
a container backend (the sanity gate reports them skipped in the local sandbox).

Reward: Harbor copies tests/ to /tests in the container and runs `bash /tests/test.sh`, which
writes a reward to /logs/verifier/reward.txt. Here the files of tests/ are test_files under
`.harbor/tests/` (the grader writes them right before grading, so the agent never sees them)
and test_command copies them to /tests, runs test.sh, then exits 0 iff the first number in
/logs/verifier/reward.txt is >= 1. With empty FAIL_TO_PASS/PASS_TO_PASS lists the grader's
verdict is then that exit status: reward 1 -> resolved. A missing reward file is unresolved.

Not supported: reward.json and fractional rewards (anything below 1 scores 0), the
[verifier]/[agent] timeouts and [environment] resource limits (cpus, memory, storage),
verifier env variables, docker-compose environments, and binary files under tests/ (the task
is skipped). gold_patch is "": the known solution is the solve.sh script (gold_script).
"""
from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path
from typing import Sequence

from envs.loaders.common import RowError, selected
from envs.tasks import DEFAULT_SPLIT, SkippedRow, Task, TaskSet

FORMAT = "harbor"
TESTS_DIR = ".harbor/tests"
VERIFIER_TESTS_DIR = "/tests"
VERIFIER_LOGS_DIR = "/logs/verifier"


def test_command(tests_dir: str = VERIFIER_TESTS_DIR, logs_dir: str = VERIFIER_LOGS_DIR) -> str:
    """Copy the tests where Harbor puts them, run test.sh, exit 0 iff the reward file says >= 1.
    Both folders are emptied first: a reward file the agent planted there is never read."""
    return (
        f"rm -rf {tests_dir}/* {logs_dir}/* && mkdir -p {tests_dir} {logs_dir} && cp -r {TESTS_DIR}/. {tests_dir}/"
        f" && (bash {tests_dir}/test.sh; true)"
        f" && awk 'NR==1 {{ok = ($1 + 0 >= 1)}} END {{exit !ok}}' {logs_dir}/reward.txt"
    )


TEST_COMMAND = test_command()
MARKERS = ("task.toml", "instruction.md")


def is_task_dir(path: Path) -> bool:
    return path.is_dir() and any((path / marker).is_file() for marker in MARKERS)


def task_dirs(source: Path) -> list[Path]:
    if is_task_dir(source):
        return [source]
    return sorted(p for p in source.iterdir() if not p.name.startswith(".") and is_task_dir(p))


def _text(path: Path, field: str) -> str:
    if not path.is_file():
        raise RowError(field, "missing")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RowError(field, "not UTF-8 text") from None


def _dir_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def _table(config: dict, name: str) -> dict:
    value = config.get(name, {})
    if not isinstance(value, dict):
        raise RowError(f"task.toml [{name}]", f"expected a table, got {type(value).__name__}")
    return value


def _str(table: dict, key: str, field: str) -> str:
    value = table.get(key, "")
    if not isinstance(value, str):
        raise RowError(field, f"expected a string, got {type(value).__name__}")
    return value


def dir_to_task(task_dir: Path) -> Task:
    task_id = task_dir.name
    try:
        config = tomllib.loads(_text(task_dir / "task.toml", "task.toml"))
    except tomllib.TOMLDecodeError as error:
        raise RowError("task.toml", f"not valid TOML: {error}") from None
    metadata, environment = _table(config, "metadata"), _table(config, "environment")
    instruction = _text(task_dir / "instruction.md", "instruction.md")
    if not instruction.strip():
        raise RowError("instruction.md", "empty")
    _text(task_dir / "tests" / "test.sh", "tests/test.sh")
    test_files = tuple(
        (f"{TESTS_DIR}/{path.relative_to(task_dir / 'tests').as_posix()}", _text(path, f"tests/{path.name}"))
        for path in sorted((task_dir / "tests").rglob("*")) if path.is_file()
    )
    image = _str(environment, "docker_image", "task.toml [environment] docker_image")
    build_context = ""
    if not image:
        env_dir = task_dir / "environment"
        if not (env_dir / "Dockerfile").is_file():
            raise RowError("environment/Dockerfile", "missing (and no [environment] docker_image in task.toml)")
        slug = re.sub(r"[^a-z0-9._-]+", "-", task_id.lower()).strip("-.") or "task"
        image = f"swerve-harbor/{slug}:{_dir_hash(env_dir)}"
        build_context = str(env_dir.resolve())
    solve = task_dir / "solution" / "solve.sh"
    return Task(
        id=task_id,
        repo=_str(metadata, "repo", "task.toml [metadata] repo") or f"harbor/{task_id}",
        workspace_dir="",
        problem_statement=instruction,
        test_command=TEST_COMMAND,
        fail_to_pass=(),
        pass_to_pass=(),
        gold_patch="",
        stratum=_str(metadata, "difficulty", "task.toml [metadata] difficulty") or "unknown",
        test_files=test_files,
        split=_str(metadata, "split", "task.toml [metadata] split") or DEFAULT_SPLIT,
        source=FORMAT,
        image=image,
        build_context=build_context,
        scratch_dirs=(VERIFIER_TESTS_DIR, VERIFIER_LOGS_DIR),
        gold_script=_text(solve, "solution/solve.sh") if solve.is_file() else "",
    )


def load(source: str, split: str, ids: Sequence[str]) -> TaskSet:
    result = TaskSet()
    for task_dir in task_dirs(Path(source).expanduser()):
        try:
            task = dir_to_task(task_dir)
        except RowError as error:
            result.skipped.append(SkippedRow(str(task_dir), error.field, error.reason))
            continue
        result.splits.add(task.split)
        if selected(task.split, task.id, split, ids):
            result.tasks.append(task)
    return result
