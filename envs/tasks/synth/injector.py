"""SWE-smith-style task synthesis: inject procedural bugs into a local Python repository.

``iter_synthesized`` copies the repository to a temporary directory (the source repository
is never written), runs its pytest suite twice on the clean copy to learn which tests pass
reliably, then tries candidate mutations (``envs.tasks.synth.mutators``) one at a time in that
copy, in a seeded order, yielding each kept one; ``synthesize`` takes the first few of them
within a time budget, and ``envs.tasks.synth.stream`` makes an endless task stream of them. A
mutation is kept when at least one previously passing test now fails and at least one still
passes. Each kept mutation becomes one row in SWE-smith's format::

    instance_id, repo, patch (bug-inducing diff, a/ b/ prefixes, applies with patch -p1),
    FAIL_TO_PASS, PASS_TO_PASS, problem_statement, image_name,
    + repo_path, family, stratum, split, hidden_cases, (and a few informational extras)

``hidden_cases`` are calls the clean suite made to the mutated function or method (on a receiver
rebuilt from its constructor's arguments and earlier calls), with their clean values, that the
grader makes beside the tests (``envs.tasks.synth.call_recorder``); empty when no recorded call tells
the mutation apart.

The problem statement is written from the failing behaviour (test names, the failing
test line, the assertion/exception pytest printed) -- never from the edit itself
(``envs.tasks.synth.statement``); tests run through ``envs.tasks.synth.pytest_run``. Settings (how many
tasks, time limits, families) are a ``SynthConfig`` (configs/schema/).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Collection, Iterable, Iterator, Optional, Sequence

from configs.schema import SynthConfig
from envs.tasks.pytest_summary import node_id_of
from envs.tasks.synth.call_recorder import CallBook, CallRecorder, default_python
from envs.tasks.synth.mutators import FAMILIES, find_mutations
from envs.tasks.synth.pytest_run import PytestRun, run_pytest
from envs.tasks.synth.sites import Mutation
from envs.tasks.synth.statement import problem_statement

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


def stratum_for(n_fail: int) -> str:
    return "easy" if n_fail <= 1 else ("medium" if n_fail <= 5 else "hard")


def _left_out(name: str) -> bool:
    return _ignored(name) or name.endswith((".pyc", ".pyo"))


def left_out_of_copy(relative: Path) -> bool:
    """True for a path (relative to the repository) that synthesis does not copy or read: VCS
    folders, caches, virtual environments, builds, bytecode."""
    return any(_left_out(part) for part in relative.parts)


def _copy_repo(src: Path, dst: Path) -> None:
    def ignore(directory: str, names: list[str]) -> set[str]:
        return {n for n in names if _left_out(n)}

    shutil.copytree(src, dst, symlinks=True, ignore=ignore)


def _failed_ids(run: PytestRun, candidates: set[str]) -> set[str]:
    return {node_id for node_id in (node_id_of(rest, candidates) for rest in run.failed) if node_id is not None}


def synthesize(repo_path: str | os.PathLike, cfg: SynthConfig, *, test_args: Iterable[str] = (),
               stats: Optional[dict] = None, log: Optional[Callable[[str], None]] = None) -> list[dict]:
    """Make up to ``cfg.num_tasks`` validated bug tasks from the Python repository at ``repo_path``.

    ``cfg.timeout_s`` bounds the whole call (baseline runs included); each mutated test run is
    bounded by ``cfg.per_run_timeout_s`` (0: a multiple of the baseline duration, see
    SynthConfig). Tests run in a temporary copy; ``repo_path`` is only read. ``stats`` (if
    given) is filled with candidates, tried, kept, seconds, baseline_passed, rejected.
    Returns SWE-smith-style rows: the first ``cfg.num_tasks`` that ``iter_synthesized`` yields.
    """
    t_start = time.monotonic()
    st = stats if stats is not None else {}
    rows: list[dict] = []
    made = iter_synthesized(repo_path, cfg, test_args=test_args, stats=st, log=log,
                            deadline=t_start + cfg.timeout_s)
    try:
        while len(rows) < cfg.num_tasks:
            row = next(made, None)
            if row is None:
                break
            rows.append(row)
    finally:
        made.close()  # removes the temporary copy now, not when the generator is collected
    st["seconds"] = round(time.monotonic() - t_start, 2)
    return rows


def iter_synthesized(repo_path: str | os.PathLike, cfg: SynthConfig, *, test_args: Iterable[str] = (),
                     stats: Optional[dict] = None, log: Optional[Callable[[str], None]] = None,
                     exclude_patches: Collection[str] = (), resume: Sequence[str] = (),
                     deadline: Optional[float] = None) -> Iterator[dict]:
    """Validated bug rows from the Python repository at ``repo_path``, one at a time, in the
    seeded try order, until the candidate mutations run out (or ``cfg.max_candidates`` were
    tried, or ``deadline`` passed).

    The repository is copied to a temporary directory (removed when the generator ends, is
    closed or is collected) and its suite run twice there; a mutation is kept when some reliably
    passing test breaks and some still pass. A mutation whose patch (or instance id) is one
    already yielded or in ``exclude_patches`` is passed over without a test run.

    ``resume``: the patches of the rows an earlier run with the same repository content and
    settings yielded first, in order. Their candidates, and every candidate before the last of
    them, are passed over without a test run (counted as tried and kept as that run counted
    them), so the rows that come next are the ones that run would have yielded next. SynthError
    when they are not found in order among the candidates (rows of another version of the
    mutators).

    ``deadline`` (a ``time.monotonic()`` value): no test run starts after it, and the baseline
    runs end by it; None (a stream): no overall bound, a baseline run is bounded by
    ``cfg.timeout_s`` and a mutated run by the per-run limit. ``stats`` (if given) holds the
    counters of ``synthesize`` and ``replayed`` (candidates passed over while resuming).
    """
    seed, python = cfg.seed, cfg.python or None
    max_candidates = cfg.max_candidates or None
    t_start = time.monotonic()
    repo = Path(repo_path).resolve()
    if not repo.is_dir():
        raise SynthError(f"not a directory: {repo}")
    say = log or (lambda msg: None)
    test_args = list(test_args)
    st = stats if stats is not None else {}
    st.update(candidates=0, tried=0, kept=0, seconds=0.0, baseline_passed=0, rejected={}, replayed=0,
              recorded_calls=0, replayable_calls=0, with_hidden_cases=0, no_hidden_cases={})

    def baseline_limit_s() -> float:
        return cfg.timeout_s if deadline is None else deadline - time.monotonic()

    with tempfile.TemporaryDirectory(prefix="swerve-synth-") as tmp:
        work = Path(tmp) / repo.name
        _copy_repo(repo, work)

        # -- baseline: two clean runs; only tests passing in both are trusted
        base = run_pytest(work, baseline_limit_s(), python=python, extra_args=test_args)
        if base.timed_out:
            raise SynthError(f"baseline test run timed out after {base.seconds:.0f}s")
        # The second clean run also records the calls hidden cases are drawn from.
        recorder = CallRecorder(Path(tmp) / "recorder", work, candidate_files(work))
        base2 = run_pytest(work, baseline_limit_s(), python=python, extra_args=[*test_args, *recorder.pytest_args],
                           extra_env=recorder.env, extra_paths=recorder.paths)
        passing = base.passed & base2.passed
        st["baseline_passed"] = len(passing)
        if len(passing) < 2:
            raise SynthError(
                f"baseline: only {len(passing)} reliably passing tests (need >= 2)\n"
                + base.output[-3000:])
        base_secs = max(base.seconds, base2.seconds)
        run_limit = cfg.per_run_timeout_s or (cfg.run_timeout_factor * base_secs + cfg.run_timeout_margin_s)
        say(f"baseline: {len(passing)} passing tests, {base_secs:.1f}s per run")
        book = _call_book(recorder, default_python(python), run_limit, st, say)

        mutations = _order(discover_mutations(work, seed=seed, families=cfg.families or None), seed)
        st["candidates"] = len(mutations)
        say(f"{len(mutations)} candidate mutations")
        seen_patches: set[str] = set(exclude_patches)
        seen_ids = {_digest(patch) for patch in seen_patches}
        replayed = 0  # how many of `resume` were found so far
        originals: dict[str, str] = {}
        for mut in mutations:
            if max_candidates is not None and st["tried"] >= max_candidates:
                break
            replaying = replayed < len(resume)
            timeout_s = run_limit
            if deadline is not None and not replaying:
                remaining = deadline - time.monotonic()
                if remaining < min(run_limit, base_secs + 2.0):
                    say("time budget exhausted")
                    break
                timeout_s = min(run_limit, remaining)
            path = work / mut.file
            if mut.file not in originals:
                original = _read(path)
                if original is None:
                    continue
                originals[mut.file] = original
            original = originals[mut.file]
            # The patch is known before the run: a duplicate (or held-out) bug costs no run.
            patch = make_patch(mut.file, original, mut.new_text)
            digest = _digest(patch)
            if patch in seen_patches or digest in seen_ids:
                continue
            st["tried"] += 1
            if replaying:
                st["replayed"] += 1
                if patch == resume[replayed]:
                    replayed += 1
                    seen_patches.add(patch)
                    seen_ids.add(digest)
                    st["kept"] += 1
                continue
            _write(path, mut.new_text)
            try:
                run = run_pytest(work, timeout_s, python=python, extra_args=test_args)
                reason = _rejection(run, passing)
                # Replayed while the mutation is in place; the expected values are the clean ones.
                hidden, no_hidden = ([], None) if reason else book.cases(work, mut.file, mut.function,
                                                                        default_python(python), timeout_s)
            finally:
                _write(path, original)
            if reason:
                st["rejected"][reason] = st["rejected"].get(reason, 0) + 1
                continue
            seen_patches.add(patch)
            seen_ids.add(digest)
            still, broken = passing & run.passed, passing - run.passed
            row = _row(repo, mut, patch, sorted(broken), sorted(still), run, cfg)
            row["hidden_cases"] = hidden
            _count_hidden(st, no_hidden)
            st["kept"] += 1
            st["seconds"] = round(time.monotonic() - t_start, 2)
            say(f"kept {row['instance_id']} {mut.family} {mut.file}:{mut.lineno} "
                f"F2P={len(broken)} P2P={len(still)}")
            yield row
        if replayed < len(resume):
            raise SynthError(
                f"cannot resume: {len(resume) - replayed} of the {len(resume)} rows already made are not "
                f"among this repository's candidate mutations, in order (made by another version of "
                f"envs/tasks/synth?)")
    st["seconds"] = round(time.monotonic() - t_start, 2)


def _rejection(run: PytestRun, passing: set[str]) -> Optional[str]:
    """Why a mutated run does not make a task (None: it does)."""
    broken = passing - run.passed
    if run.timed_out:
        return "timeout"
    if not broken:
        return "no_test_broken"
    if not passing & run.passed:
        return "all_tests_broken"
    if not _failed_ids(run, broken):
        return "no_failure_reported"
    return None


def _call_book(recorder: CallRecorder, python: str, timeout_s: float, st: dict,
               say: Callable[[str], None]) -> CallBook:
    recorded = recorder.recording()
    if recorded is None:
        say("the recording run wrote no calls: tasks get no hidden cases")
    book = recorder.book(python, timeout_s)
    st["recorded_calls"] = len(recorded or [])
    st["replayable_calls"] = book.count()
    say(f"{book.count()} of {len(recorded or [])} recorded calls replay to their recorded value "
        f"({len(book.calls)} functions)")
    return book


def _count_hidden(st: dict, no_hidden: Optional[str]) -> None:
    if no_hidden is None:
        st["with_hidden_cases"] += 1
    else:
        st["no_hidden_cases"][no_hidden] = st["no_hidden_cases"].get(no_hidden, 0) + 1


def _digest(patch: str) -> str:
    """What names a row (its instance id is ``<repo name>.<digest>``)."""
    return hashlib.sha1(patch.encode("utf-8")).hexdigest()[:8]


def _row(repo: Path, mut: Mutation, patch: str, f2p: list[str], p2p_all: list[str],
         run: PytestRun, cfg: SynthConfig) -> dict:
    digest = _digest(patch)
    p2p = p2p_all
    if len(p2p) > cfg.max_p2p:
        p2p = sorted(random.Random(f"p2p:{cfg.seed}:{digest}").sample(p2p, cfg.max_p2p))
    return {
        "instance_id": f"{repo.name}.{digest}",
        "repo": repo.name,
        "patch": patch,
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "problem_statement": problem_statement(f2p, run, repo.name, cfg.max_detailed_failures,
                                               cfg.max_listed_failures),
        "image_name": "",
        "repo_path": str(repo),
        "family": mut.family,
        "stratum": stratum_for(len(f2p)),
        "split": "train",
        "file": mut.file,
        "description": mut.description,
    }
