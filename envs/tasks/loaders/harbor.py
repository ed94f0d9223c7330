"""Harbor task directories -> Task, as Harbor 0.25.0 (PyPI `harbor==0.25.0`, task.toml schema
1.4) defines them; tests/envs/tasks/test_harbor_tasks.py checks tasks made by its own `harbor init`.

A source is one task directory or a directory of task directories. A task directory holds
`task.toml`, `instruction.md` (-> problem_statement), `environment/` (a Dockerfile build
context, or [environment] docker_image), `tests/test.sh` (the verifier; writes its reward to
/logs/verifier/reward.json or reward.txt) and optionally `solution/` (solve.sh and the files it
uses, at /solution when the gold runs). The id is [task] name ("org/name"), else the folder's name.

From task.toml: [metadata] difficulty (-> stratum), split, repo (default "harbor/<id>");
[environment] docker_image, workdir (the agent's workspace), network_mode ("no-network" runs;
"public" and "allowlist" need a sandbox with a network, sandbox.docker_network); [verifier]
environment_mode ("shared" / "separate", resolved as Harbor does), timeout_sec, env,
[verifier.environment] docker_image; [agent] timeout_sec; artifacts (what a separate verifier
gets from the agent's container, beside Harbor's /logs/artifacts). Grading: envs/grading/harbor_verifier.py.

Refused, by name, as skipped rows: multi-step tasks ([[steps]], steps/), Windows tasks,
docker-compose environments, [verifier] env values taken from the host (${VAR}), a schema other
than 1.x. Read but not enforced: [environment] cpus, memory_mb, storage_mb, gpus (the run's
sandbox.* limits apply), healthcheck, mcp_servers, [agent]/[verifier] user. Tool leftovers
(__pycache__, *.pyc, .pytest_cache, ...) in a task folder are ignored.
"""
from __future__ import annotations

import base64
import hashlib
import posixpath
import re
import tomllib
from pathlib import Path
from typing import Sequence

from envs.tasks.loaders.common import RowError, selected
from envs.tasks.task import DEFAULT_SPLIT, HarborVerifier, SkippedRow, Task, TaskSet

FORMAT = "harbor"
HARBOR_VERSION = "0.25.0"
VERIFIER_TESTS_DIR = "/tests"
VERIFIER_LOGS_DIR = "/logs/verifier"
ARTIFACTS_DIR = "/logs/artifacts"
SOLUTION_DIR = "/solution"
REWARD_FILES = ("reward.json", "reward.txt")
MARKERS = ("task.toml", "instruction.md")
# What tools leave in a task folder (pip byte-compiles Harbor's own template): never task content.
LEFTOVER_NAMES = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".ipynb_checkpoints",
                            ".DS_Store", ".git", ".venv", ".harborignore"})
LEFTOVER_SUFFIXES = (".pyc", ".pyo")
_NO_NETWORK = "no-network"


def is_task_dir(path: Path) -> bool:
    return path.is_dir() and any((path / marker).is_file() for marker in MARKERS)


def task_dirs(source: Path) -> list[Path]:
    if is_task_dir(source):
        return [source]
    return sorted(p for p in source.iterdir() if not p.name.startswith(".") and is_task_dir(p))


def _leftover(path: Path) -> bool:
    return path.name in LEFTOVER_NAMES or path.name.endswith(LEFTOVER_SUFFIXES)


def task_files(root: Path, task_dir: Path) -> list[Path]:
    """The files under root, sorted, without tool leftovers. A link is refused: its target may lie
    outside the task (Harbor refuses those too)."""
    files, stack = [], [root]
    while stack:
        folder = stack.pop()
        for entry in sorted(folder.iterdir()):
            if _leftover(entry):
                continue
            if entry.is_symlink():
                raise RowError(entry.relative_to(task_dir).as_posix(), "a symbolic link (copy the file in instead)")
            if entry.is_dir():
                stack.append(entry)
            elif entry.is_file():
                files.append(entry)
    return sorted(files)


def _encoded(root: Path, task_dir: Path) -> tuple[tuple[str, str], ...]:
    return tuple((path.relative_to(root).as_posix(), base64.b64encode(path.read_bytes()).decode())
                 for path in task_files(root, task_dir))


def _text(path: Path, field: str) -> str:
    if not path.is_file():
        raise RowError(field, "missing")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RowError(field, "not UTF-8 text") from None


def _dir_hash(root: Path, task_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in task_files(root, task_dir):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def _table(config: dict, name: str) -> dict:
    value = config.get(name, {})
    if not isinstance(value, dict):
        raise RowError(f"task.toml [{name}]", f"expected a table, got {type(value).__name__}")
    return value


def _typed(table: dict, key: str, field: str, kind: type, default):
    value = table.get(key, default)
    if value is None:
        return default
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
        raise RowError(field, f"expected {kind.__name__}, got {type(value).__name__}")
    return value


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.") or "task"


def _check_schema(config: dict, task_dir: Path) -> None:
    version = _typed(config, "schema_version", "task.toml schema_version", str, "1.0")
    if version.split(".")[0] != "1":
        raise RowError("task.toml schema_version", f"{version!r}: swerve reads Harbor's task schema 1.x "
                       f"(checked against harbor=={HARBOR_VERSION}, schema 1.4)")
    if config.get("steps") or (task_dir / "steps").is_dir():
        raise RowError("task.toml [[steps]]", "a multi-step task: swerve runs single-step Harbor tasks only "
                       "(each step as its own task directory works)")
    if (task_dir / "environment" / "docker-compose.yaml").is_file():
        raise RowError("environment/docker-compose.yaml", "multi-container environments are not supported")


def _network(environment: dict) -> str:
    mode = _typed(environment, "network_mode", "task.toml [environment] network_mode", str, "")
    allow = environment.get("allow_internet")
    if mode not in ("", _NO_NETWORK, "public", "allowlist"):
        raise RowError("task.toml [environment] network_mode", f"{mode!r}: expected no-network, public or allowlist")
    if mode == "allowlist":
        raise RowError("task.toml [environment] network_mode", "'allowlist' is not supported (use no-network or public)")
    if mode == "public" or (not mode and allow is True):
        return "public"
    return "none"


def _artifacts(config: dict) -> tuple[str, ...]:
    entries = config.get("artifacts", [])
    if not isinstance(entries, list):
        raise RowError("task.toml artifacts", "expected a list")
    paths = [ARTIFACTS_DIR]
    for entry in entries:
        source = entry.get("source") if isinstance(entry, dict) else entry
        if not isinstance(source, str) or not source.strip():
            raise RowError("task.toml artifacts", f"{entry!r}: expected a path or a table with a source")
        if isinstance(entry, dict) and entry.get("service") not in (None, "main"):
            raise RowError("task.toml artifacts", f"{source!r}: artifacts of other services are not supported")
        if ".." in posixpath.normpath(source).split("/"):
            raise RowError("task.toml artifacts", f"{source!r} leaves its folder ('..')")
        paths.append(posixpath.normpath(source))
    return tuple(dict.fromkeys(paths))


def _verifier(config: dict, task_dir: Path, agent_image: str, agent_context: str) -> HarborVerifier:
    verifier = _table(config, "verifier")
    tests_dir = task_dir / "tests"
    _text(tests_dir / "test.sh", "tests/test.sh")
    tests = _encoded(tests_dir, task_dir)
    env = _table(verifier, "env")
    for key, value in env.items():
        if not isinstance(value, str) or "${" in value:
            raise RowError(f"task.toml [verifier.env] {key}", "only literal strings are supported (not the host's ${VAR})")
    mode = _typed(verifier, "environment_mode", "task.toml [verifier] environment_mode", str, "")
    own_env = verifier.get("environment")
    if mode not in ("", "shared", "separate"):
        raise RowError("task.toml [verifier] environment_mode", f"{mode!r}: expected shared or separate")
    mode = mode or ("separate" if own_env is not None else "shared")
    # What test.sh (and what it runs) names is what the verifier writes; see HarborVerifier.
    named = b"".join(base64.b64decode(content) for _, content in tests)
    reward_files = tuple(name for name in REWARD_FILES if name.encode() in named) or REWARD_FILES
    common = dict(tests=tests, reward_files=reward_files, env=tuple(sorted(env.items())),
                  timeout_s=_typed(verifier, "timeout_sec", "task.toml [verifier] timeout_sec", float, 600.0))
    if mode == "shared":
        return HarborVerifier(mode="shared", **common)
    image = _typed(own_env or {}, "docker_image", "task.toml [verifier.environment] docker_image", str, "")
    if image:
        return HarborVerifier(mode="separate", image=image, artifacts=_artifacts(config), **common)
    if (tests_dir / "Dockerfile").is_file():
        tag = f"swerve-harbor-verifier/{_slug(task_dir.name)}:{_dir_hash(tests_dir, task_dir)}"
        return HarborVerifier(mode="separate", image=tag, build_context=str(tests_dir.resolve()),
                              tests_in_image=True, artifacts=_artifacts(config), **common)
    # Harbor's fallback: a fresh container of the agent's own environment, the tests copied in.
    return HarborVerifier(mode="separate", image=agent_image, build_context=agent_context,
                          artifacts=_artifacts(config), **common)


def dir_to_task(task_dir: Path) -> Task:
    try:
        config = tomllib.loads(_text(task_dir / "task.toml", "task.toml"))
    except tomllib.TOMLDecodeError as error:
        raise RowError("task.toml", f"not valid TOML: {error}") from None
    _check_schema(config, task_dir)
    package, metadata = _table(config, "task"), _table(config, "metadata")
    environment, agent = _table(config, "environment"), _table(config, "agent")
    task_id = _typed(package, "name", "task.toml [task] name", str, "") or task_dir.name
    if _typed(environment, "os", "task.toml [environment] os", str, "linux") != "linux":
        raise RowError("task.toml [environment] os", "only linux tasks run here")
    instruction = _text(task_dir / "instruction.md", "instruction.md")
    if not instruction.strip():
        raise RowError("instruction.md", "empty")
    image = _typed(environment, "docker_image", "task.toml [environment] docker_image", str, "")
    build_context = ""
    if not image:
        env_dir = task_dir / "environment"
        if not (env_dir / "Dockerfile").is_file():
            raise RowError("environment/Dockerfile", "missing (and no [environment] docker_image in task.toml)")
        image = f"swerve-harbor/{_slug(task_id)}:{_dir_hash(env_dir, task_dir)}"
        build_context = str(env_dir.resolve())
    verifier = _verifier(config, task_dir, image, build_context)
    solution = task_dir / "solution"
    gold_files = _encoded(solution, task_dir) if solution.is_dir() else ()
    has_solve = any(path == "solve.sh" for path, _ in gold_files)
    scratch = [VERIFIER_TESTS_DIR, VERIFIER_LOGS_DIR, ARTIFACTS_DIR] + ([SOLUTION_DIR] if has_solve else [])
    return Task(
        id=task_id,
        repo=_typed(metadata, "repo", "task.toml [metadata] repo", str, "") or f"harbor/{task_id}",
        workspace_dir="",
        problem_statement=instruction,
        test_command=f"bash {VERIFIER_TESTS_DIR}/test.sh",
        fail_to_pass=(),
        pass_to_pass=(),
        gold_patch="",
        stratum=_typed(metadata, "difficulty", "task.toml [metadata] difficulty", str, "") or "unknown",
        test_files=(),
        split=_typed(metadata, "split", "task.toml [metadata] split", str, "") or DEFAULT_SPLIT,
        source=FORMAT,
        image=image,
        build_context=build_context,
        scratch_dirs=tuple(scratch),
        gold_script=f"bash {SOLUTION_DIR}/solve.sh" if has_solve else "",
        workdir=_typed(environment, "workdir", "task.toml [environment] workdir", str, ""),
        harbor=verifier,
        gold_files=gold_files if has_solve else (),
        agent_timeout_s=_typed(agent, "timeout_sec", "task.toml [agent] timeout_sec", float, 0.0),
        network=_network(environment),
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
