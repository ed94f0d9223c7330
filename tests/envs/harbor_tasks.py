"""Harbor tasks as test fixtures, made by Harbor 0.25.0's own `harbor init --task` code (`make harbor`
installs it), then adapted the way a task author would so that they build and run offline here.

Harbor asks for Python>=3.12 and only 3.11 is here: its CLI does not start, but `_init_task` (what
`harbor init --task` calls) runs once `typing.override` (3.12+) is taken from typing_extensions.
It runs in Harbor's own venv, in a subprocess, so nothing of Harbor is imported into the tests.

    task_dir = harbor_init(tmp_path, "swerve/hello", verifier_mode="shared", no_pytest=True)
    author_offline(task_dir, docker_image)
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Optional

import pytest

HARBOR_VERSION = "0.25.0"
DEFAULT_HARBOR_DIR = Path(f"~/.cache/swerve/harbor-{HARBOR_VERSION}").expanduser()
# Seconds `_init_task` may take (measured: ~0.5 s, most of it importing Harbor).
INIT_TIMEOUT_S = 120
# Where the verifier wheels go in a build context (and so, with Harbor's `COPY . /tests/`, in /tests).
WHEELS_DIR = "swerve-wheels"

_INIT = """
import json, sys, typing, typing_extensions
typing.override = typing_extensions.override  # Harbor imports typing.override, new in 3.12
from pathlib import Path
from harbor.cli.init import _init_task
name, out_dir, flags = json.loads(sys.argv[1])
_init_task(name, Path(out_dir), **flags)
"""


def harbor_dir() -> Optional[Path]:
    """Harbor's venv (SWERVE_HARBOR_DIR, else make's default), None when `make harbor` has not run."""
    found = Path(os.environ.get("SWERVE_HARBOR_DIR") or DEFAULT_HARBOR_DIR).expanduser()
    return found if (found / ".installed").is_file() else None


def require_harbor() -> Path:
    """Harbor's venv, or skip the calling test naming the fix."""
    found = harbor_dir()
    if found is None:
        pytest.skip(f"Harbor {HARBOR_VERSION} is not installed (make harbor)")
    return found


def harbor_init(out_dir: Path, name: str, **flags) -> Path:
    """`harbor init --task <name>` into out_dir (name is "org/name"; flags are `_init_task`'s keyword
    arguments: verifier_mode, no_pytest, no_solution, steps, ...). Returns the task's folder."""
    python = require_harbor() / "bin" / "python"
    done = subprocess.run([str(python), "-c", _INIT, json.dumps([name, str(out_dir), flags])],
                          capture_output=True, text=True, timeout=INIT_TIMEOUT_S)
    task_dir = Path(out_dir) / name.split("/", 1)[-1]
    if done.returncode != 0 or not (task_dir / "task.toml").is_file():
        raise RuntimeError(f"harbor init --task {name} {flags} failed ({done.returncode}): {done.stderr[-3000:]}")
    return task_dir


def _harbor_file(relative: str) -> Path:
    """A file of Harbor's installed package (relative to site-packages)."""
    found = sorted(require_harbor().glob(f"lib/python3*/site-packages/{relative}"))
    if not found:
        raise FileNotFoundError(f"{relative} is not in Harbor's venv (make harbor)")
    return found[-1]


def verifier_wheels() -> list[Path]:
    """The wheels `make harbor` downloads beside Harbor: what Harbor's verifier template installs
    with uv (pytest 8.4.1 and pytest-json-ctrf 0.3.5, which --ctrf needs, and pytest's dependencies)."""
    found = sorted(require_harbor().glob("wheels/*.whl"))
    if not any(wheel.name.startswith("pytest_json_ctrf-") for wheel in found):
        raise FileNotFoundError("no pytest-json-ctrf wheel beside Harbor (make harbor)")
    return found


def _install_wheels(dockerfile: Path, wheels: list[Path]) -> None:
    """Put the wheels in this Dockerfile's build context and unzip them into the image's site-packages
    right after FROM: the base image has no pip and no index is reachable, and a pure wheel unzipped
    (dist-info included) is an installed package, whose pytest11 entry point pytest finds. pytest
    comes too: no pytest-json-ctrf release runs on the base image's pytest 7.2.1 (they read
    TestReport.start, new in 7.3), and /usr/local's site-packages comes first on sys.path."""
    (dockerfile.parent / WHEELS_DIR).mkdir(exist_ok=True)
    for wheel in wheels:
        shutil.copy(wheel, dockerfile.parent / WHEELS_DIR / wheel.name)
    lines = dockerfile.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("FROM ")) + 1
    lines[at:at] = [f"COPY {WHEELS_DIR}/ /tmp/{WHEELS_DIR}/",
                    "RUN site=\"$(python3 -c 'import site; print(site.getsitepackages()[0])')\" && "
                    f"for w in /tmp/{WHEELS_DIR}/*.whl; do python3 -m zipfile -e \"$w\" \"$site\"; done && "
                    f"rm -r /tmp/{WHEELS_DIR}"]
    dockerfile.write_text("\n".join(lines) + "\n")


def _set_no_network(task_toml: Path) -> None:
    """[environment] network_mode = "no-network": what this task can have here; a text edit so that
    the rest of Harbor's task.toml stays byte for byte."""
    lines, table = task_toml.read_text().splitlines(), None
    for i, line in enumerate(lines):
        if line.startswith("["):
            table = line.strip("[] ")
        elif table == "environment" and line.split("=")[0].strip() == "network_mode":
            lines[i] = 'network_mode = "no-network"'
    task_toml.write_text("\n".join(lines) + "\n")
    if tomllib.loads(task_toml.read_text())["environment"].get("network_mode") != "no-network":
        raise ValueError(f"{task_toml}: no [environment] network_mode to set")


def author_offline(task_dir: Path, base_image: str, wheels: Optional[list[Path]] = None) -> Path:
    """Adapt Harbor's template task to build and run offline on `base_image` (Python 3.11, pytest,
    no pip, no registry); everything else Harbor made (README, .gitignore, __pycache__ leftovers,
    instructions, solutions, [[steps]]) is left as it is. Returns task_dir."""
    wheels = wheels or verifier_wheels()
    shared = tomllib.loads((task_dir / "task.toml").read_text())["verifier"].get("environment_mode") == "shared"
    tests_dirs = [d for d in [task_dir / "tests", *sorted(task_dir.glob("steps/*/tests"))] if d.is_dir()]
    # Shared mode's pytest test.sh fetches uv from astral.sh to get pytest: use the separate-mode
    # one (pytest as installed), with the wheels installed in the agent's image, where it runs.
    for tests in tests_dirs:
        if "astral.sh/uv" in (tests / "test.sh").read_text():
            shutil.copy(_harbor_file("harbor/cli/template-task/pytest-tests/test.sh"), tests / "test.sh")
    runs_pytest = {tests for tests in tests_dirs if "--ctrf" in (tests / "test.sh").read_text()}
    # Every FROM names a registry image (ubuntu, python): none can be pulled, the base image is here.
    # The uv lines pull ghcr.io/astral-sh/uv and install from PyPI: the same pins come from the wheels.
    for dockerfile in [task_dir / "environment" / "Dockerfile", *(d / "Dockerfile" for d in tests_dirs)]:
        if not dockerfile.is_file():
            continue
        text = re.sub(r"^FROM\s+\S+", f"FROM {base_image}", dockerfile.read_text(), flags=re.M)
        text = re.sub(r"^(COPY --from=ghcr\.io/astral-sh/uv\S*|RUN uv pip install) .*\n+", "", text, flags=re.M)
        dockerfile.write_text(text)
        if dockerfile.parent in runs_pytest and not shared:
            _install_wheels(dockerfile, wheels)
    if shared and runs_pytest:
        _install_wheels(task_dir / "environment" / "Dockerfile", wheels)
    _set_no_network(task_dir / "task.toml")
    return task_dir
