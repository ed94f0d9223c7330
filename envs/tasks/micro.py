"""The "micro" task source: generated one-function bug tasks sized for a tiny model on a laptop.

Each task is a two-file repository (`mod.py`, `test_mod.py`): a function with a one-line bug,
one correct helper, and real pytest tests (one fails because of the bug, the others pass).
LEARNING.md measured what a ~4M-parameter model can learn in minutes: fixed file names, short
edits, and issues that contain the text to be typed. So issues name the call, the actual and
the expected value, and in the "easy" stratum also the suspected edit (`old` should be `new`),
as many real bug reports do; "hard" issues give only the symptom.

Generation is deterministic (seeded per split), validated in-process (the fixed function
passes every test, the buggy one fails exactly the failing test) and cached by content under
`~/.cache/swerve/tasks/micro-<hash>/` (or $SWERVE_CACHE_DIR). Train and eval tasks are drawn with different seeds;
the templates and families are shared, the names, constants and inputs are not.
"""
from __future__ import annotations

import difflib
import functools
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from envs.tasks.cache import build_dir_once, cache_root
from envs.tasks.minimal_edit import minimal_edit
from envs.tasks.pytest_summary import PYTEST_COMMAND
from envs.tasks.task import HiddenCase, Task

SPLIT_SIZES = {"train": 300, "eval": 100}
SPLIT_SEEDS = {"train": 1, "eval": 2}
# The tokenizer learns the text of this many train tasks (the first ones, which never change):
# fixed, so neither a larger train split nor the stream (envs/tasks/micro_stream.py) changes the
# tokenizer or invalidates a cached model.
CORPUS_TASKS = 300
EASY_FRACTION = 0.75
MODULE, TEST_MODULE, PYTEST_INI = "mod.py", "test_mod.py", "pytest.ini"
# Classic progress lines ("test_mod.py .F.") instead of ones padded to 80 columns: a small
# observation cap keeps the assertion that failed.
PYTEST_CONFIG = "[pytest]\nconsole_output_style = classic\n"

# No "test": a helper named test_* would be collected by pytest.
_VERBS = ("count", "pick", "find", "sum", "check", "score", "measure", "select", "total", "scan",
          "rank", "keep", "tune", "fit", "get", "calc", "clip", "tally", "grade", "span")
_NOUNS = ("items", "values", "points", "marks", "steps", "hits", "rows", "bins", "ticks", "sizes",
          "levels", "ages", "prices", "votes", "days", "units", "loads", "coins", "cells", "bytes")
# Not "n", "total", "out": the templates use those names themselves.
# Function names of the two splits never overlap, but both use every verb and noun (a tiny
# model cannot copy a word it never saw): train takes the (verb, noun) pairs whose index sum is
# even, eval the odd ones.
SPLIT_PARITY = {"train": 0, "eval": 1}
_VARS = ("a", "b", "r", "k", "x", "y", "v", "w", "lo", "hi", "t", "m", "p", "q", "z", "s", "c")
_LISTS = ("xs", "vals", "nums", "data", "seq", "arr")


@dataclass(frozen=True)
class Template:
    family: str
    # Correct source with {f} (function name) and {v0}.. (distinct variable names), {l} (a list
    # name), {k} (a constant); `bug` is (correct, buggy) text of one line, same placeholders.
    source: str
    bug: tuple[str, str]
    # Candidate argument tuples for tests, given the rng and the constant.
    inputs: Callable[[random.Random, int], list]
    constant: Callable[[random.Random], int] = lambda rng: rng.randint(2, 9)
    # Constant in the buggy line, when the bug changes the constant.
    wrong_constant: Callable[[int, random.Random], int] = lambda k, rng: k


def _lists(rng: random.Random, k: int) -> list:
    return [([rng.randint(0, 12) for _ in range(rng.randint(2, 5))] + [k],) for _ in range(8)]


def _pairs(rng: random.Random, k: int) -> list:
    return [(rng.randint(-5, 12), rng.randint(-5, 12)) for _ in range(8)]


def _ints(rng: random.Random, k: int) -> list:
    return [(rng.randint(1, 9),) for _ in range(7)] + [(0,)]


def _list_and_threshold(rng: random.Random, k: int) -> list:
    out = []
    for _ in range(8):
        xs = [rng.randint(0, 9) for _ in range(rng.randint(3, 5))]
        out.append((xs, rng.choice(xs)))
    return out


def _triples(rng: random.Random, k: int) -> list:
    out = []
    for _ in range(8):
        lo, hi = sorted(rng.sample(range(0, 15), 2))
        out.append((rng.choice([lo, hi, rng.randint(lo, hi)]), lo, hi))
    return out


TEMPLATES = (
    Template("compare", "def {f}({l}, {v0}):\n    n = 0\n    for {v1} in {l}:\n        if {v1} >= {v0}:\n"
             "            n += 1\n    return n\n", ("if {v1} >= {v0}:", "if {v1} > {v0}:"), _list_and_threshold),
    Template("compare", "def {f}({l}, {v0}):\n    n = 0\n    for {v1} in {l}:\n        if {v1} <= {v0}:\n"
             "            n += 1\n    return n\n", ("if {v1} <= {v0}:", "if {v1} < {v0}:"), _list_and_threshold),
    Template("compare", "def {f}({v0}, {v1}, {v2}):\n    return {v1} <= {v0} <= {v2}\n",
             ("return {v1} <= {v0} <= {v2}", "return {v1} < {v0} <= {v2}"), _triples),
    Template("compare", "def {f}({v0}, {v1}, {v2}):\n    return {v1} <= {v0} <= {v2}\n",
             ("return {v1} <= {v0} <= {v2}", "return {v1} <= {v0} < {v2}"), _triples),
    Template("off_by_one", "def {f}({v0}):\n    total = 0\n    for {v1} in range(1, {v0} + 1):\n"
             "        total += {v1}\n    return total\n",
             ("for {v1} in range(1, {v0} + 1):", "for {v1} in range(1, {v0}):"), _ints),
    Template("off_by_one", "def {f}({v0}):\n    out = []\n    for {v1} in range({v0}):\n"
             "        out.append({v1} * {v1})\n    return out\n",
             ("for {v1} in range({v0}):", "for {v1} in range({v0} - 1):"), _ints),
    Template("constant", "def {f}({v0}):\n    return {v0} + {k}\n", ("return {v0} + {k}", "return {v0} + {kb}"),
             _ints, wrong_constant=lambda k, rng: k + rng.choice([-1, 1, 2])),
    Template("constant", "def {f}({v0}, {v1}):\n    return {v0} * {k} - {v1}\n",
             ("return {v0} * {k} - {v1}", "return {v0} * {kb} - {v1}"), _pairs,
             wrong_constant=lambda k, rng: k + rng.choice([-1, 1])),
    Template("variable", "def {f}({l}):\n    {v0} = {l}[0]\n    for {v1} in {l}:\n        if {v1} > {v0}:\n"
             "            {v0} = {v1}\n    return {v0}\n", ("return {v0}", "return {v1}"), _lists),
    Template("variable", "def {f}({v0}, {v1}):\n    {v2} = {v0} - {v1}\n    if {v2} < 0:\n"
             "        {v2} = -{v2}\n    return {v2}\n", ("return {v2}", "return {v0}"), _pairs),
    Template("operator", "def {f}({l}):\n    total = 0\n    for {v0} in {l}:\n        total = total + {v0}\n"
             "    return total\n", ("total = total + {v0}", "total = total - {v0}"), _lists),
    Template("operator", "def {f}({v0}, {v1}):\n    return ({v0} + {v1}) * 2\n",
             ("return ({v0} + {v1}) * 2", "return ({v0} - {v1}) * 2"), _pairs),
)

FAMILIES = tuple(sorted({t.family for t in TEMPLATES}))

# Correct helpers: the repository's passing tests besides the buggy function's own.
HELPERS = (
    ("def {h}({v0}, {v1}):\n    return {v0} * {v1}\n", lambda rng: (rng.randint(1, 9), rng.randint(1, 9))),
    ("def {h}({v0}):\n    return {v0} % 2 == 0\n", lambda rng: (rng.randint(0, 20),)),
    ("def {h}({v0}, {v1}):\n    return max({v0}, {v1}) - min({v0}, {v1})\n",
     lambda rng: (rng.randint(0, 9), rng.randint(0, 9))),
)


@dataclass(frozen=True)
class MicroTask:
    id: str
    family: str
    stratum: str
    files: dict            # path -> buggy content
    fixed_module: str
    problem_statement: str
    fail_to_pass: tuple
    pass_to_pass: tuple
    # Calls on `mod`, graded by their values and never written to the workspace (envs/tasks/hidden_cases.py).
    hidden_cases: tuple = ()


def _call(fn_name: str, args: tuple) -> str:
    return f"{fn_name}({', '.join(repr(a) for a in args)})"


def _run(source: str, name: str, args: tuple):
    scope: dict = {}
    exec(compile(source, MODULE, "exec"), scope)  # our own generated code, never task input
    return scope[name](*[list(a) if isinstance(a, list) else a for a in args])


def _names(rng: random.Random, parity: int, avoid: str = "") -> str:
    """A verb_noun function name of the split's pairs, other than `avoid`. Names repeat across
    tasks (each task is its own repository) and never carry a number: when train names were
    numbered to keep them unique (73% of them), RL taught the policy to append a digit to every
    name it grepped for, and held-out names have none."""
    while True:
        verb, noun = rng.randrange(len(_VERBS)), rng.randrange(len(_NOUNS))
        if (verb + noun) % 2 != parity:
            noun = (noun + 1) % len(_NOUNS)
        name = f"{_VERBS[verb]}_{_NOUNS[noun]}"
        if name != avoid:
            return name


def draw(task_id: str, family: str, rng: random.Random, easy: bool, parity: int) -> MicroTask | None:
    """One task of `family` from `rng`'s next draws, or None when this draw does not validate."""
    template = rng.choice([t for t in TEMPLATES if t.family == family])
    names = dict(zip(("v0", "v1", "v2"), rng.sample(_VARS, 3)))
    k = template.constant(rng)
    kb = template.wrong_constant(k, rng)
    fill = dict(names, f=_names(rng, parity), l=rng.choice(_LISTS), k=k, kb=kb)
    fixed_fn = template.source.format(**fill)
    good_line, bad_line = (part.format(**fill) for part in template.bug)
    if fixed_fn.count(good_line) != 1 or good_line == bad_line:
        return None
    buggy_fn = fixed_fn.replace(good_line, bad_line)
    helper_src, helper_args = rng.choice(HELPERS)
    hnames = dict(zip(("v0", "v1"), rng.sample(_VARS, 2)))
    helper_name = _names(rng, parity, avoid=fill["f"])
    helper = helper_src.format(h=helper_name, **hnames)
    parts = [fixed_fn, helper] if rng.random() < 0.5 else [helper, fixed_fn]
    fixed_module = "\n\n".join(parts)
    buggy_module = fixed_module.replace(fixed_fn, buggy_fn)
    fail_case = same_case = None
    for args in template.inputs(rng, k):
        want, got = _run(fixed_module, fill["f"], args), _run(buggy_module, fill["f"], args)
        if want != got and fail_case is None:
            fail_case = (args, want, got)
        elif want == got and same_case is None:
            same_case = (args, want)
    if fail_case is None:
        return None
    h_args = helper_args(rng)
    h_want = _run(fixed_module, helper_name, h_args)
    f = fill["f"]
    tests = (f"from mod import {f}, {helper_name}\n\n\n"
             + (f"def test_{f}():\n    assert {_call(f, same_case[0])} == {same_case[1]!r}\n\n\n" if same_case else "")
             + f"def test_{f}_bug():\n    assert {_call(f, fail_case[0])} == {fail_case[1]!r}\n\n\n"
             f"def test_{helper_name}():\n    assert {_call(helper_name, h_args)} == {h_want!r}\n")
    statement = (f"{f} returns a wrong result\n\n`{_call(f, fail_case[0])}` returns `{fail_case[2]!r}`, "
                 f"expected `{fail_case[1]!r}`.")
    if easy:
        old, new = minimal_edit(bad_line.strip(), good_line.strip())
        if buggy_module.count(old) != 1:
            return None
        statement += f" Probably `{old}` should be `{new}` in {MODULE}."
    hidden = _hidden_cases(task_id, template, k, fixed_module, buggy_module, fill["f"], fail_case[0],
                           (helper_name, helper_args))
    return MicroTask(task_id, template.family, "easy" if easy else "hard",
                     {MODULE: buggy_module, TEST_MODULE: tests, PYTEST_INI: PYTEST_CONFIG}, fixed_module, statement,
                     (f"{TEST_MODULE}::test_{f}_bug",),
                     ((f"{TEST_MODULE}::test_{f}",) if same_case else ()) + (f"{TEST_MODULE}::test_{helper_name}",),
                     hidden)


HIDDEN_BUG_CASES = 2


def _hidden_cases(task_id: str, template: Template, k: int, fixed: str, buggy: str, name: str, shown: tuple,
                  helper: tuple) -> tuple:
    """Calls the tests do not make: inputs on which the fix and the bug differ (the issue's own
    call excluded while others exist), one on which they agree, and the helper. Drawn from an rng
    of their own, so the tasks (and the tokenizer's corpus) are what they were without them."""
    rng = random.Random(f"{task_id}/hidden")
    differ, agree = [], []
    for args in template.inputs(rng, k) + template.inputs(rng, k):
        want = _run(fixed, name, args)
        (differ if want != _run(buggy, name, args) else agree).append((args, want))
    unseen = [case for case in differ if case[0] != shown]
    chosen = (unseen or differ)[:HIDDEN_BUG_CASES] + agree[:1]
    helper_name, helper_args = helper[0], helper[1](rng)
    chosen.append((helper_args, _run(fixed, helper_name, helper_args)))
    names = [name] * (len(chosen) - 1) + [helper_name]
    return tuple(HiddenCase("mod", fn, json.dumps([list(a) if isinstance(a, (list, tuple)) else a for a in args]),
                            json.dumps(want)) for fn, (args, want) in zip(names, chosen))


def generate(split: str, count: Optional[int] = None) -> List[MicroTask]:
    """The first `count` tasks of one split (default: its size), deterministic: the first n tasks
    are the same whatever the count."""
    if split not in SPLIT_SIZES:
        raise ValueError(f"unknown split {split!r} for source 'micro'; allowed splits: {sorted(SPLIT_SIZES)}")
    rng = random.Random(SPLIT_SEEDS[split])
    tasks: List[MicroTask] = []
    for index in range(SPLIT_SIZES[split] if count is None else count):
        # Families in turn, so every split has the same balanced mix; retry until one validates.
        family, easy, task = FAMILIES[index % len(FAMILIES)], rng.random() < EASY_FRACTION, None
        while task is None:
            task = draw(f"micro-{split}-{index:03d}", family, rng, easy, SPLIT_PARITY[split])
        tasks.append(task)
    return tasks


@functools.cache
def corpus_texts() -> Tuple[Tuple[str, ...], ...]:
    """What the offline tokenizer learns these tasks from (policies.corpus.build_corpus): per
    train task its issue (first: it starts with the function's name), module and tests. The
    first CORPUS_TASKS train tasks only: eval text stays unseen, and the corpus stays the same
    however many tasks the train split or the stream hand out. Kept per process (generating the
    tasks costs ~2 s, asked at every run's start), hence tuples."""
    return tuple((t.problem_statement, t.files[MODULE], t.files[TEST_MODULE]) for t in generate("train", CORPUS_TASKS))


def content_keys(task: MicroTask) -> set[str]:
    """What makes two tasks the same task whatever their ids: the buggy module, the tests or the
    issue. A stream task sharing any of them with a task of a finite split is not handed out."""
    return {hashlib.sha256(f"{kind}\0{text}".encode()).hexdigest()
            for kind, text in (("module", task.files[MODULE]), ("tests", task.files[TEST_MODULE]),
                               ("issue", task.problem_statement))}


def _gold_patch(buggy: str, fixed: str) -> str:
    return "".join(difflib.unified_diff(buggy.splitlines(keepends=True), fixed.splitlines(keepends=True),
                                        fromfile=f"a/{MODULE}", tofile=f"b/{MODULE}"))


def _cache_key() -> str:
    """This generator's own source: any change to it makes new workspaces."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _write(workspace: Path, files: dict) -> None:
    workspace.mkdir(parents=True)
    for name, content in files.items():
        (workspace / name).write_text(content)


def workspace_root(cache_dir: Optional[str] = None) -> Path:
    """Where micro workspaces are written (None: under envs.tasks.cache.cache_root())."""
    return (Path(cache_dir).expanduser() if cache_dir else cache_root()) / "tasks" / f"micro-{_cache_key()}"


def to_task(micro: MicroTask, root: Path, split: str) -> Task:
    """The Task of a generated one, its workspace written under `root` on first use."""
    target = root / micro.id
    build_dir_once(target, lambda workspace, files=micro.files: _write(workspace, files))
    return Task(
        id=micro.id, repo=f"swerve-micro/{micro.id}", workspace_dir=str(target),
        problem_statement=micro.problem_statement, test_command=PYTEST_COMMAND,
        fail_to_pass=micro.fail_to_pass, pass_to_pass=micro.pass_to_pass,
        gold_patch=_gold_patch(micro.files[MODULE], micro.fixed_module), stratum=micro.stratum,
        test_files=((TEST_MODULE, micro.files[TEST_MODULE]), (PYTEST_INI, PYTEST_CONFIG)), split=split, source="micro",
        family=micro.family, hidden_cases=micro.hidden_cases,
    )


def load_micro(split: str, ids: Sequence[str] = (), cache_dir: Optional[str] = None) -> List[Task]:
    """The tasks of one split; workspaces under `cache_dir` (None: envs.tasks.cache.cache_root())."""
    root = workspace_root(cache_dir)
    return [to_task(micro, root, split) for micro in generate(split) if not ids or micro.id in ids]
