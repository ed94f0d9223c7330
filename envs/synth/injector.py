"""SWE-smith-style task synthesis: inject procedural bugs into a local Python repository.

``synthesize`` copies the repository to a temporary directory (the source repository is
never written), runs its pytest suite twice on the clean copy to learn which tests pass
reliably, then tries candidate mutations (``envs.synth.mutators``) one at a time in that
copy. A mutation is kept when at least one previously passing test now fails and at
least one still passes. Each kept mutation becomes one row in SWE-smith's format::

    instance_id, repo, patch (bug-inducing diff, a/ b/ prefixes, applies with patch -p1),
    FAIL_TO_PASS, PASS_TO_PASS, problem_statement, image_name,
    + repo_path, family, stratum, split, (and a few informational extras)

The problem statement is written from the failing behaviour (test names, the failing
test line, the assertion/exception pytest printed) -- never from the edit itself.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from envs.synth.mutators import FAMILIES, Mutation, find_mutations

__all__ = [
    "PytestRun",
    "SynthError",
    "candidate_files",
    "discover_mutations",
    "make_patch",
    "parse_pytest_output",
    "problem_statement",
    "run_pytest",
    "stratum_for",
    "synthesize",
]

IGNORED_DIRS = {
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", "env", ".env", ".tox", ".nox",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", "node_modules", "build", "dist",
    ".eggs", "site-packages", ".idea", ".vscode",
}
NON_SOURCE_DIRS = {"tests", "test", "testing", "docs", "doc", "examples", "example",
                   "benchmarks", "benchmark", "scripts", "tools", "ci"}
NON_SOURCE_FILES = {"conftest.py", "setup.py", "noxfile.py", "tasks.py", "fabfile.py",
                    "manage.py", "__main__.py", "_version.py", "version.py"}


class SynthError(RuntimeError):
    """The repository cannot be used for synthesis (e.g. no test passes at baseline)."""


# ---------------------------------------------------------------------------------------
# Files and mutations


def _ignored(name: str) -> bool:
    return name in IGNORED_DIRS or name.endswith(".egg-info")


def candidate_files(repo: Path) -> list[str]:
    """Non-test ``.py`` files of ``repo`` (posix paths relative to it), sorted."""
    repo = Path(repo)
    out = []
    for root, dirs, files in os.walk(repo):
        dirs[:] = sorted(d for d in dirs if not _ignored(d) and d not in NON_SOURCE_DIRS
                         and not d.startswith("."))
        for name in sorted(files):
            if not name.endswith(".py") or name in NON_SOURCE_FILES:
                continue
            if name.startswith("test_") or name.endswith("_test.py") or name == "tests.py":
                continue
            out.append((Path(root) / name).relative_to(repo).as_posix())
    return sorted(out)


def _read(path: Path) -> str | None:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            return fh.read()
    except (UnicodeDecodeError, OSError):
        return None


def _write(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)


def discover_mutations(repo: Path, seed: int = 0,
                       families: Iterable[str] | None = None) -> list[Mutation]:
    """Every candidate mutation in the repository's non-test files (source order)."""
    fams = tuple(families) if families else FAMILIES
    out: list[Mutation] = []
    for rel in candidate_files(repo):
        text = _read(Path(repo) / rel)
        if text:
            out.extend(find_mutations(text, rel, seed=seed, families=fams))
    return out


def _order(mutations: list[Mutation], seed: int) -> list[Mutation]:
    """Deterministic try order: shuffle within each family, then round-robin families."""
    rng = random.Random(f"order:{seed}")
    by_family: dict[str, list[Mutation]] = {}
    for m in mutations:
        by_family.setdefault(m.family, []).append(m)
    for fam in sorted(by_family):
        rng.shuffle(by_family[fam])
    families = sorted(by_family)
    rng.shuffle(families)
    out: list[Mutation] = []
    index = 0
    while len(out) < len(mutations):
        for fam in families:
            if index < len(by_family[fam]):
                out.append(by_family[fam][index])
        index += 1
    return out


def make_patch(rel: str, old: str, new: str) -> str:
    """Unified diff of one file with ``a/`` ``b/`` prefixes (applies with ``patch -p1``)."""
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    lines = difflib.unified_diff(a, b, fromfile=f"a/{rel}", tofile=f"b/{rel}", n=3)
    out = []
    for line in lines:
        if not line.endswith(("\n", "\r")):
            line += "\n\\ No newline at end of file\n"
        out.append(line)
    return "".join(out)


# ---------------------------------------------------------------------------------------
# Running pytest


@dataclass
class PytestRun:
    returncode: int
    output: str
    seconds: float
    timed_out: bool = False
    passed: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)  # FAILED + ERROR lines (raw rest of line)
    sections: dict[str, str] = field(default_factory=dict)  # failure headline -> body


_SUMMARY_RE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(.*)$")
_SECTION_RE = re.compile(r"^_{3,} (.+?) _{3,}$")


def parse_pytest_output(output: str) -> tuple[set[str], set[str], dict[str, str]]:
    """(passed node ids, failed/error summary remainders, failure sections) from ``-rA``."""
    passed: set[str] = set()
    failed: set[str] = set()
    sections: dict[str, str] = {}
    lines = output.splitlines()
    in_summary = False
    current: str | None = None
    body: list[str] = []
    for line in lines:
        if line.startswith("=") and "short test summary info" in line:
            in_summary = True
            if current is not None:
                sections.setdefault(current, "\n".join(body))
                current = None
            continue
        if in_summary:
            m = _SUMMARY_RE.match(line)
            if m:
                kind, rest = m.groups()
                if kind == "PASSED":
                    passed.add(rest.strip())
                elif kind in ("FAILED", "ERROR"):
                    failed.add(rest.strip())
            continue
        if line.startswith("=") and line.rstrip().endswith("="):
            if current is not None:
                sections.setdefault(current, "\n".join(body))
                current = None
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
    return passed, failed, sections


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return  # the group already exited: nothing is left to kill


def run_pytest(workdir: Path, timeout_s: float, *, python: str | None = None,
               extra_args: Iterable[str] = ()) -> PytestRun:
    """Run the repository's tests in ``workdir`` (a temporary copy) and parse the result."""
    workdir = Path(workdir)
    env = dict(os.environ)
    for key in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER"):
        env.pop(key, None)
    paths = [str(workdir)] + ([str(workdir / "src")] if (workdir / "src").is_dir() else [])
    env.update(
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONHASHSEED="0",
        PYTHONPATH=os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
        COLUMNS="200",
        NO_COLOR="1",
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


# ---------------------------------------------------------------------------------------
# Problem statements


def _headline(node_id: str) -> str:
    """The name pytest prints above a test's failure block (``Class.test_x[param]``)."""
    parts = node_id.split("::")
    return ".".join(parts[1:]) if len(parts) > 1 else node_id


def _summary_message(node_id: str, failed_lines: set[str]) -> str:
    for rest in sorted(failed_lines):
        if rest == node_id:
            return ""
        if rest.startswith(node_id + " - "):
            return rest[len(node_id) + 3 :].strip()
    return ""


_FRAME_RE = re.compile(r"^(\S.*?):(\d+): in (\S+)$")


@dataclass
class _Failure:
    node_id: str
    test_line: str = ""  # the test-file source line that failed
    error_lines: list[str] = field(default_factory=list)  # pytest's "E" lines
    raised_in: str = ""  # "func (path)" of the innermost non-test frame
    message: str = ""


def _parse_failure(node_id: str, body: str, message: str) -> _Failure:
    test_file = node_id.split("::")[0]
    fail = _Failure(node_id, message=message)
    frames: list[tuple[str, str, list[str]]] = []
    for line in body.splitlines():
        m = _FRAME_RE.match(line)
        if m:
            frames.append((m.group(1), m.group(3), []))
        elif line.startswith("E ") or line == "E":
            fail.error_lines.append(line[1:].rstrip()[3:] if line.startswith("E   ") else
                                    line[1:].strip())
        elif frames and line.startswith("    ") and not set(line.strip()) <= set("^~ "):
            frames[-1][2].append(line[4:].rstrip())
    test_frames = [f for f in frames if f[0] == test_file or f[0].endswith("/" + test_file)]
    if test_frames:
        code = [c for c in test_frames[-1][2] if c.strip()]
        fail.test_line = "\n".join(code[-3:]) if code else ""
    if frames and frames[-1] not in test_frames:
        path, func, _ = frames[-1]
        if "site-packages" not in path and not path.startswith("/"):
            fail.raised_in = f"`{func}` (`{path}`)"
    return fail


def _module_hint(node_ids: list[str]) -> str:
    mods = []
    for nid in node_ids:
        stem = Path(nid.split("::")[0]).stem
        stem = re.sub(r"^test_|_test$", "", stem)
        if stem and stem not in mods:
            mods.append(stem)
    return ", ".join(f"`{m}`" for m in mods[:3])


def problem_statement(f2p: list[str], run: PytestRun, repo_name: str,
                      max_details: int = 3, max_listed: int = 10) -> str:
    """A GitHub-issue-like report of the failing behaviour (no LM, no fix revealed)."""
    failures = []
    for nid in f2p:
        body = run.sections.get(_headline(nid)) or next(
            (v for k, v in run.sections.items() if k.endswith(" " + _headline(nid))), "")
        failures.append(_parse_failure(nid, body, _summary_message(nid, run.failed)))
    first = failures[0]
    test_name = _headline(first.node_id)
    detail = ""
    if first.test_line and first.error_lines:
        err = first.error_lines[0].strip()
        got = _got_value(first.error_lines)
        detail = f": `{_one_line(first.test_line)}` fails" + (f" ({got})" if got else f" with `{_clip(err, 80)}`")
    elif first.message:
        detail = f": {_clip(first.message, 100)}"
    area = _module_hint(f2p)
    title = f"`{test_name}`{detail}" if detail else f"`{test_name}` fails"
    n = len(f2p)
    lines = [f"# {title}", ""]
    lines.append(
        f"In `{repo_name}`, {'a test that used to pass now fails' if n == 1 else f'{n} tests that used to pass now fail'}"
        + (f" (behaviour exercised by the {area} tests)" if area else "") + "."
        + " The rest of the test suite still passes."
    )
    lines += ["", "Failing test" + ("s:" if n > 1 else ":")]
    for nid in f2p[:max_listed]:
        lines.append(f"- `{nid}`")
    if n > max_listed:
        lines.append(f"- ... and {n - max_listed} more")
    for fail in failures[:max_details]:
        lines += ["", f"## `{_headline(fail.node_id)}`", ""]
        if fail.test_line:
            lines += ["The test does:", "", "```python", fail.test_line, "```", ""]
        if fail.error_lines:
            shown = [e for e in fail.error_lines if e.strip()][:12]
            lines += ["and it fails with:", "", "```", *shown, "```"]
        elif fail.message:
            lines += ["and it fails with:", "", "```", _clip(fail.message, 300), "```"]
        if fail.raised_in:
            lines += ["", f"The error is raised from {fail.raised_in}."]
    lines += [
        "",
        "## Expected behaviour",
        "",
        "These tests should pass, as they did before; the other tests must keep passing.",
        "",
        "## How to reproduce",
        "",
        "```",
        "python -m pytest " + " ".join(_shell_quote(n) for n in f2p[:3]),
        "```",
    ]
    return "\n".join(lines) + "\n"


def _got_value(error_lines: list[str]) -> str:
    """'got 5' from an ``assert 5 == 4`` explanation, when there is one."""
    for line in error_lines:
        m = re.match(r"\s*(?:AssertionError: )?assert (.+?) (==|!=|is|is not|in|not in|<=|>=|<|>) (.+)$",
                     line.strip())
        if m:
            left = m.group(1)
            if len(left) <= 60 and m.group(2) == "==":
                return f"got `{left}`"
            return f"`{_clip(line.strip(), 80)}`"
        if line.strip() and not line.strip().startswith("assert"):
            return f"`{_clip(line.strip(), 80)}`"
    return ""


def _one_line(text: str) -> str:
    return _clip(" ".join(text.splitlines()[-1].split()), 80)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _shell_quote(text: str) -> str:
    return text if re.fullmatch(r"[\w./:\-\[\]]+", text) else "'" + text.replace("'", "'\\''") + "'"


# ---------------------------------------------------------------------------------------
# Synthesis


def stratum_for(n_fail: int) -> str:
    return "easy" if n_fail <= 1 else ("medium" if n_fail <= 5 else "hard")


def _copy_repo(src: Path, dst: Path) -> None:
    def ignore(directory: str, names: list[str]) -> set[str]:
        return {n for n in names if _ignored(n) or n.endswith((".pyc", ".pyo"))}

    shutil.copytree(src, dst, symlinks=True, ignore=ignore)


def _failed_ids(run: PytestRun, candidates: set[str]) -> set[str]:
    out = set()
    for rest in run.failed:
        if rest in candidates:
            out.add(rest)
            continue
        for m in re.finditer(" - ", rest):
            if rest[: m.start()] in candidates:
                out.add(rest[: m.start()])
    return out


def synthesize(repo_path: str | os.PathLike, n: int, seed: int = 0, timeout_s: float = 600.0,
               *, python: str | None = None, test_args: Iterable[str] = (),
               max_p2p: int = 20, per_run_timeout_s: float | None = None,
               max_candidates: int | None = None, families: Iterable[str] | None = None,
               stats: dict | None = None,
               log: Callable[[str], None] | None = None) -> list[dict]:
    """Make up to ``n`` validated bug tasks from the Python repository at ``repo_path``.

    ``timeout_s`` bounds the whole call (baseline runs included); each mutated test run is
    bounded by ``per_run_timeout_s`` (default: 3x the baseline duration + 10 s). Tests run
    in a temporary copy; ``repo_path`` is only read. ``stats`` (if given) is filled with
    candidates, tried, kept, seconds, baseline_passed. Returns SWE-smith-style rows.
    """
    t_start = time.monotonic()
    deadline = t_start + timeout_s
    repo = Path(repo_path).resolve()
    if not repo.is_dir():
        raise SynthError(f"not a directory: {repo}")
    say = log or (lambda msg: None)
    test_args = list(test_args)
    st = stats if stats is not None else {}
    st.update(candidates=0, tried=0, kept=0, seconds=0.0, baseline_passed=0, rejected={})
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="swerve-synth-") as tmp:
        work = Path(tmp) / repo.name
        _copy_repo(repo, work)

        # -- baseline: two clean runs; only tests passing in both are trusted
        base = run_pytest(work, deadline - time.monotonic(), python=python, extra_args=test_args)
        if base.timed_out:
            raise SynthError(f"baseline test run timed out after {base.seconds:.0f}s")
        base2 = run_pytest(work, deadline - time.monotonic(), python=python, extra_args=test_args)
        passing = base.passed & base2.passed
        st["baseline_passed"] = len(passing)
        if len(passing) < 2:
            raise SynthError(
                f"baseline: only {len(passing)} reliably passing tests (need >= 2)\n"
                + base.output[-3000:])
        base_secs = max(base.seconds, base2.seconds)
        run_limit = per_run_timeout_s or (3.0 * base_secs + 10.0)
        say(f"baseline: {len(passing)} passing tests, {base_secs:.1f}s per run")

        mutations = _order(discover_mutations(work, seed=seed, families=families), seed)
        st["candidates"] = len(mutations)
        say(f"{len(mutations)} candidate mutations")
        seen_patches: set[str] = set()
        originals: dict[str, str] = {}
        for mut in mutations:
            if len(rows) >= n or (max_candidates is not None and st["tried"] >= max_candidates):
                break
            remaining = deadline - time.monotonic()
            if remaining < min(run_limit, base_secs + 2.0):
                say("time budget exhausted")
                break
            path = work / mut.file
            if mut.file not in originals:
                original = _read(path)
                if original is None:
                    continue
                originals[mut.file] = original
            original = originals[mut.file]
            st["tried"] += 1
            _write(path, mut.new_text)
            try:
                run = run_pytest(work, min(run_limit, remaining), python=python,
                                 extra_args=test_args)
            finally:
                _write(path, original)
            reason = None
            still = passing & run.passed
            broken = passing - run.passed
            if run.timed_out:
                reason = "timeout"
            elif not broken:
                reason = "no_test_broken"
            elif not still:
                reason = "all_tests_broken"
            elif not _failed_ids(run, broken):
                reason = "no_failure_reported"
            if reason:
                st["rejected"][reason] = st["rejected"].get(reason, 0) + 1
                continue
            patch = make_patch(mut.file, original, mut.new_text)
            if patch in seen_patches:
                continue
            seen_patches.add(patch)
            rows.append(_row(repo, mut, patch, sorted(broken), sorted(still), run, seed, max_p2p))
            st["kept"] = len(rows)
            say(f"kept {rows[-1]['instance_id']} {mut.family} {mut.file}:{mut.lineno} "
                f"F2P={len(broken)} P2P={len(still)}")
    st["seconds"] = round(time.monotonic() - t_start, 2)
    return rows


def _row(repo: Path, mut: Mutation, patch: str, f2p: list[str], p2p_all: list[str],
         run: PytestRun, seed: int, max_p2p: int) -> dict:
    digest = hashlib.sha1(patch.encode("utf-8")).hexdigest()[:8]
    p2p = p2p_all
    if len(p2p) > max_p2p:
        p2p = sorted(random.Random(f"p2p:{seed}:{digest}").sample(p2p, max_p2p))
    return {
        "instance_id": f"{repo.name}.{digest}",
        "repo": repo.name,
        "patch": patch,
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "problem_statement": problem_statement(f2p, run, repo.name),
        "image_name": "",
        "repo_path": str(repo),
        "family": mut.family,
        "stratum": stratum_for(len(f2p)),
        "split": "train",
        "file": mut.file,
        "description": mut.description,
    }
