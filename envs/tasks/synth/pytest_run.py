"""Running a repository's pytest suite in a copy, for synthesis (envs/tasks/synth/injector.py).

`run_pytest` runs the suite in its own process group (killed as a whole at the time limit) with
plugins and the user's pytest options off, and reads the result: which tests passed and failed
(from the `-rA` summary, envs/tasks/pytest_summary.py) and each failure's section (what the problem
statement quotes).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from envs.tasks.pytest_summary import PASSED, SUMMARY_HEADER, summary_lines


@dataclass
class PytestRun:
    returncode: int
    output: str
    seconds: float
    timed_out: bool = False
    passed: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)  # FAILED + ERROR lines (raw rest of line)
    sections: dict[str, str] = field(default_factory=dict)  # failure headline -> body


_SECTION_RE = re.compile(r"^_{3,} (.+?) _{3,}$")


def failure_sections(output: str) -> dict[str, str]:
    """Failure headline ("Class.test_x[param]") -> the body pytest printed under it, for the
    sections above the short summary."""
    sections: dict[str, str] = {}
    current: str | None = None
    body: list[str] = []
    for line in output.splitlines():
        if line.startswith("=") and (SUMMARY_HEADER in line or line.rstrip().endswith("=")):
            if current is not None:
                sections.setdefault(current, "\n".join(body))
                current = None
            if SUMMARY_HEADER in line:
                break
            continue
        m = _SECTION_RE.match(line)
        if m:
            if current is not None:
                sections.setdefault(current, "\n".join(body))
            current, body = m.group(1), []
            continue
        if current is not None:
            body.append(line)
    if current is not None:
        sections.setdefault(current, "\n".join(body))
    return sections


def parse_pytest_output(output: str) -> tuple[set[str], set[str], dict[str, str]]:
    """(passed node ids, failed/error summary remainders, failure sections) from ``-rA``."""
    lines = summary_lines(output)
    passed = {rest for word, rest in lines if word == PASSED}
    failed = {rest for word, rest in lines if word in ("FAILED", "ERROR")}
    return passed, failed, failure_sections(output)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return  # the group already exited: nothing is left to kill


def run_pytest(workdir: Path, timeout_s: float, *, python: str | None = None,
               extra_args: Iterable[str] = (), extra_env: Mapping[str, str] | None = None,
               extra_paths: Iterable[str] = ()) -> PytestRun:
    """Run the repository's tests in ``workdir`` (a temporary copy) and parse the result.
    ``extra_paths`` go on PYTHONPATH after the repository's own (a plugin's folder must not shadow
    its modules); ``extra_env`` is set for the run."""
    workdir = Path(workdir)
    env = dict(os.environ)
    for key in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER"):
        env.pop(key, None)
    paths = [str(workdir)] + ([str(workdir / "src")] if (workdir / "src").is_dir() else []) + list(extra_paths)
    env.update(
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONHASHSEED="0",
        PYTHONPATH=os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
        COLUMNS="200",
        NO_COLOR="1",
        **(extra_env or {}),
    )
    cmd = [python or sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider",
           "--tb=short", "--color=no", "-o", "console_output_style=classic",
           f"--rootdir={workdir}", *extra_args]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        out, _ = proc.communicate()
    finally:
        _kill_group(proc)  # stray children of the test run
    text = out.decode("utf-8", errors="replace")
    passed, failed, sections = parse_pytest_output(text)
    return PytestRun(proc.returncode, text, time.monotonic() - t0, timed_out, passed, failed,
                     sections)
