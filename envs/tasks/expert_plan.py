"""What the scripted expert types, planned from a task's gold patch (envs/expert.py plays it).

The gold patch is a one-line edit (`parse_gold_patch`); the plan is the replies of an agent
that knows it: run the failing tests, look at the function (`grep -n -A`), fix the line with
a short line-addressed `sed -i 'Ns/old/new/' file` (or `sed -i 's/old/new/' file` when the issue
names the edit), re-run the tests, `submit`. A recovery plan first makes a plausible wrong edit
(`wrong_lines`), sees the tests fail, re-reads the line and fixes it.
"""
from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass
from typing import Optional

from envs.tasks.minimal_edit import TOKEN, minimal_edit
from envs.tasks.task import Task

# Share of plans that run the failing tests before looking at the code (the rest look first):
# both orders occur in real agents' traces, so SFT does not learn one fixed opening.
TEST_FIRST_RATE = 0.6

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")
_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)\s*\(")
_ASSIGN = re.compile(r"^\s*(\w+)\s*=[^=]")
# Plausible wrong replacements for a token of the correct segment.
_SWAPS = {
    "<": ["<=", ">"], "<=": ["<", ">="], ">": [">=", "<"], ">=": [">", "<="],
    "==": ["!="], "!=": ["=="], "and": ["or"], "or": ["and"], "+": ["-"], "-": ["+"],
    "*": ["/"], "/": ["*"], "True": ["False"], "False": ["True"],
}


@dataclass(frozen=True)
class Fix:
    path: str       # file relative to the repository root
    line_no: int    # 1-based line number of the buggy line
    buggy: str      # the buggy line (no newline)
    fixed: str      # the fixed line


def parse_gold_patch(patch: str) -> Fix:
    """The file, line number and (buggy, fixed) line of a one-line unified diff."""
    path, line_no, removed, added = "", 0, [], []
    old_line = 0
    for raw in patch.splitlines():
        if raw.startswith("--- "):
            continue
        if raw.startswith("+++ "):
            name = raw[4:].strip().split("\t")[0]
            path = name[2:] if name.startswith("b/") else name
            continue
        match = _HUNK.match(raw)
        if match:
            old_line = int(match.group(1))
            continue
        if not old_line:
            continue
        if raw.startswith("-"):
            if not removed:
                line_no = old_line
            removed.append(raw[1:])
            old_line += 1
        elif raw.startswith("+"):
            added.append(raw[1:])
        elif raw.startswith("\\"):
            continue
        else:
            old_line += 1
    if not path or len(removed) != 1 or len(added) != 1:
        raise ValueError(f"not a one-line patch ({len(removed)} removed, {len(added)} added lines)")
    return Fix(path, line_no, removed[0], added[0])


def _sed_regex(text: str) -> str:
    return re.sub(r"([\\/.*\[\]^$])", r"\\\1", text)


def _sed_repl(text: str) -> str:
    return re.sub(r"([\\/&])", r"\\\1", text)


def _shell_quote_body(text: str) -> str:
    return text.replace("'", "'\\''")


def sed_fix_command(path: str, line_no: int, line: str, target: str) -> str:
    old, new = minimal_edit(line, target)
    body = f"{line_no}s/{_sed_regex(old)}/{_sed_repl(new)}/"
    return f"sed -i '{_shell_quote_body(body)}' {path}"


def issue_edit(task: Task, fix: Fix, lines: list[str]) -> Optional[str]:
    """`sed -i 's/old/new/' file` when the issue itself says `old` should be `new` and `old`
    occurs once in the file: an agent copies the edit from the issue instead of a line number."""
    old, new = minimal_edit(fix.buggy, fix.fixed)
    statement = task.problem_statement
    if f"`{old}`" not in statement or f"`{new}`" not in statement:
        return None
    if sum(line.count(old) for line in lines) != 1:
        return None
    return f"sed -i '{_shell_quote_body(f's/{_sed_regex(old)}/{_sed_repl(new)}/')}' {fix.path}"


def _reply(thought: str, command: str, think: bool) -> str:
    block = f"```bash\n{command}\n```"
    return f"{thought}\n{block}" if think and thought else block


def _test_files(task: Task) -> list[str]:
    files = []
    for node in task.fail_to_pass:
        name = node.split("::")[0]
        if name not in files:
            files.append(name)
    return files


def _enclosing_def(lines: list[str], line_no: int) -> tuple[Optional[str], int]:
    for index in range(line_no - 1, -1, -1):
        match = _DEF.match(lines[index])
        if match:
            return match.group(1), index + 1
    return None, 0


def _inspect_command(fix: Fix, lines: list[str]) -> str:
    name, def_no = _enclosing_def(lines, fix.line_no)
    if name and 0 < fix.line_no - def_no <= 30:
        after = fix.line_no - def_no + 1
        return f"grep -n -A{after} 'def {name}(' {fix.path}"
    first = max(1, fix.line_no - 3)
    return f"grep -n '' {fix.path} | sed -n '{first},{fix.line_no + 3}p'"


def wrong_lines(fix: Fix, lines: list[str]) -> list[str]:
    """Plausible wrong versions of the fixed line (neither the buggy nor the fixed line)."""
    old, new = minimal_edit(fix.buggy, fix.fixed)
    start = fix.buggy.find(old)
    head, tail = fix.fixed[:start], fix.fixed[start + len(new):]
    tokens = TOKEN.findall(new)
    candidates = []
    for index, token in enumerate(tokens):
        options = list(_SWAPS.get(token, []))
        if re.fullmatch(r"\d+", token):
            value = int(token)
            options += [str(value + 1), str(value - 1) if value > 0 else "2", str(value * 10)]
        if re.fullmatch(r"[A-Za-z_]\w*", token) and token not in _SWAPS and token not in ("not", "self"):
            name, def_no = _enclosing_def(lines, fix.line_no)
            names = []
            for body in lines[def_no:fix.line_no - 1] if name else []:
                match = _ASSIGN.match(body)
                if match and match.group(1) not in names:
                    names.append(match.group(1))
            options += [n for n in names if n != token]
        for option in options:
            candidate = head + "".join(tokens[:index] + [option] + tokens[index + 1:]) + tail
            candidates.append(candidate)
    if " not " in f" {new} ":
        candidates.append(head + re.sub(r"\bnot ", "", new, count=1) + tail)
    seen, result = {fix.buggy, fix.fixed}, []
    for candidate in candidates:
        if candidate not in seen:
            seen.add(candidate)
            result.append(candidate)
    return result


_THOUGHTS = {
    "test": ["Run the failing tests first.", "Reproduce the bug with the tests."],
    "inspect": ["Look at the function from the issue.", "Find the function in the source."],
    "fix": ["Fix line {n}.", "Edit line {n} as the issue says."],
    "issue_fix": ["Apply the edit from the issue.", "Make the change the issue suggests."],
    "wrong": ["Try changing line {n}.", "Line {n} looks wrong; edit it."],
    "retest": ["Run the tests again.", "Check the fix with the tests."],
    "reinspect": ["Still failing; look at line {n} again.", "The tests fail; re-read line {n}."],
    "submit": ["The tests pass; submit.", "All tests pass."],
}


def plan_trace(task: Task, rng: random.Random, wrong: Optional[str], think: bool) -> list[tuple[str, str]]:
    """(step kind, reply) pairs; `wrong` is a wrong version of the fixed line, or None; `think`
    starts each reply with a one-line thought."""
    fix = parse_gold_patch(task.gold_patch)
    lines = read_lines(task, fix.path)
    tests = " ".join(_test_files(task))
    # --tb=no: the summary line (test id, assertion) fits a small observation cap. -qq: no
    # "N passed in 0.02s" line, whose duration changes with the machine's load, so the traces (and
    # the SFT policy made of them) are the same in every run; the exit code says pass or fail.
    test_cmd = f"python -m pytest -qq --tb=no {tests}"

    def say(kind: str, command: str) -> tuple[str, str]:
        thought = rng.choice(_THOUGHTS[kind.replace("_fail", "")]).format(n=fix.line_no)
        return kind, _reply(thought, command, think)

    steps = []
    if rng.random() < TEST_FIRST_RATE:
        steps.append(say("test", test_cmd))
    steps.append(say("inspect", _inspect_command(fix, lines)))
    if wrong is not None:
        steps.append(say("wrong", sed_fix_command(fix.path, fix.line_no, fix.buggy, wrong)))
        steps.append(say("retest_fail", test_cmd))
        steps.append(say("reinspect", f"sed -n '{fix.line_no}p' {fix.path}"))
        steps.append(say("fix", sed_fix_command(fix.path, fix.line_no, wrong, fix.fixed)))
    else:
        from_issue = issue_edit(task, fix, lines)
        if from_issue:
            steps.append(("fix", _reply(rng.choice(_THOUGHTS["issue_fix"]), from_issue, think)))
        else:
            steps.append(say("fix", sed_fix_command(fix.path, fix.line_no, fix.buggy, fix.fixed)))
    steps.append(say("retest", test_cmd))
    steps.append(say("submit", "submit"))
    return steps


def read_lines(task: Task, path: str) -> list[str]:
    with open(os.path.join(task.workspace_dir, path)) as handle:
        return handle.read().splitlines()


def has_wrong_edit(task: Task) -> bool:
    try:
        fix = parse_gold_patch(task.gold_patch)
        return bool(wrong_lines(fix, read_lines(task, fix.path)))
    except (ValueError, OSError):
        return False
