"""Scripted expert traces for SFT: solve built-in tasks through the real env, keep resolved ones.

The expert reads a task's gold patch (a one-line edit) and acts like an agent: run the failing
tests, look at the function with `grep -n -A`, fix the line with a short line-addressed
`sed -i 'Ns/old/new/' file` (or `sed -i 's/old/new/' file` when the issue names the edit),
re-run the tests, `submit`. A seeded fraction of traces includes a
failure and its recovery (LEARNING.md): a plausible wrong edit, the failing test output,
re-inspection of the line, the correct fix, passing tests, submit.

Every trace is played for real through `gymnasium.make("swerve/SWE-v0")` (its own
LocalSandbox); observations are the env's, and only episodes that end resolved are written.
Rows are OpenAI-style `messages` JSONL that `policies.sft.read_traces` / `run_sft` read.

    python -m envs.expert --out traces.jsonl -n 2 --seed 0
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import gymnasium

import envs  # noqa: F401  (registers swerve/SWE-v0)
from envs.tasks import Task, load_tasks
from envs.actions import SUBMIT, parse_action

DEFAULT_RECOVERY_RATE = 0.3
_TOKEN = re.compile(r"\w+|\s+|//|\*\*|[<>=!]=|[^\w\s]")
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


@dataclass
class Trace:
    task_id: str
    messages: list = field(default_factory=list)
    resolved: bool = False
    recovery: bool = False
    turns: int = 0


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


def minimal_edit(line: str, target: str) -> tuple[str, str]:
    """(old, new) substrings so that replacing the first `old` in `line` by `new` gives `target`.

    Token-level common prefix/suffix, widened until both sides hold a word character, do not
    start or end with whitespace, and `old` first occurs at the edited position.
    """
    a, b = _TOKEN.findall(line), _TOKEN.findall(target)
    pre = 0
    while pre < min(len(a), len(b)) and a[pre] == b[pre]:
        pre += 1
    suf = 0
    while suf < min(len(a), len(b)) - pre and a[len(a) - 1 - suf] == b[len(b) - 1 - suf]:
        suf += 1
    lo, hi_a, hi_b = pre, len(a) - suf, len(b) - suf

    def segs():
        return "".join(a[lo:hi_a]), "".join(b[lo:hi_b])

    def ok(old: str, new: str) -> bool:
        for seg in (old, new):
            if len(seg) < 2 or seg != seg.strip() or not re.search(r"\w", seg):
                return False
        return line.find(old) == len("".join(a[:lo]))

    base = (lo, hi_a, hi_b)
    best = None
    for total in range(len(a) + 1):  # fewest extra tokens first, extending right before left
        for left in range(total + 1):
            right = total - left
            lo, hi_a, hi_b = base[0] - left, base[1] + right, base[2] + right
            if lo >= 0 and hi_a <= len(a) and ok(*segs()):
                best = (lo, hi_a, hi_b)
                break
        if best:
            break
    lo, hi_a, hi_b = best or (0, len(a), len(b))
    old, new = segs()
    if line.replace(old, new, 1) != target:
        raise ValueError(f"no minimal edit from {line!r} to {target!r}")
    return old, new


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
    tokens = _TOKEN.findall(new)
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


def plan_trace(task: Task, rng: random.Random, wrong: Optional[str], think: bool = True) -> list[tuple[str, str]]:
    """(step kind, reply) pairs; `wrong` is a wrong version of the fixed line, or None."""
    fix = parse_gold_patch(task.gold_patch)
    lines = _read_lines(task, fix.path)
    tests = " ".join(_test_files(task))
    # --tb=no: the summary line (test id, assertion) fits a small observation cap.
    test_cmd = f"python -m pytest -q --tb=no {tests}"

    def say(kind: str, command: str) -> tuple[str, str]:
        thought = rng.choice(_THOUGHTS[kind.replace("_fail", "")]).format(n=fix.line_no)
        return kind, _reply(thought, command, think)

    steps = []
    if rng.random() < 0.6:
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


def _read_lines(task: Task, path: str) -> list[str]:
    with open(os.path.join(task.workspace_dir, path)) as handle:
        return handle.read().splitlines()


def run_trace(env, task: Task, steps: list[tuple[str, str]], system_prompt: str,
              recovery: bool) -> Optional[Trace]:
    """Play the steps in the env; the Trace if every check held and it resolved, else None."""
    obs, _ = env.reset(options={"task": task})
    trace = Trace(task_id=task.id, recovery=recovery)
    trace.messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": obs}]
    reward, terminated = 0.0, False
    for kind, reply in steps:
        if terminated:
            return None
        obs, reward, terminated, truncated, info = env.step(reply)
        trace.messages.append({"role": "assistant", "content": reply})
        if not terminated:  # the grader's report after submit is never part of a rollout's context
            trace.messages.append({"role": "user", "content": obs})
        trace.turns += 1
        code = info.get("exit_code")
        if kind in ("test", "retest_fail") and code == 0:
            return None  # the bug (or the wrong edit) did not make the tests fail
        if kind in ("inspect", "reinspect", "wrong", "fix") and code != 0:
            return None
        if kind == "retest" and code != 0:
            return None
        if truncated:
            return None
    if not terminated or reward != 1.0:
        return None
    trace.resolved = True
    return trace


def solve(env, task: Task, rng: random.Random, recovery: bool, system_prompt: str,
          think: bool = True) -> Optional[Trace]:
    """One resolved trace for the task (with recovery if asked and possible), or None."""
    if recovery:
        fix = parse_gold_patch(task.gold_patch)
        candidates = wrong_lines(fix, _read_lines(task, fix.path))
        rng.shuffle(candidates)
        for wrong in candidates[:4]:
            trace = run_trace(env, task, plan_trace(task, rng, wrong, think), system_prompt, True)
            if trace is not None:
                return trace
    return run_trace(env, task, plan_trace(task, rng, None, think), system_prompt, False)


def _has_wrong_edit(task: Task) -> bool:
    try:
        fix = parse_gold_patch(task.gold_patch)
        return bool(wrong_lines(fix, _read_lines(task, fix.path)))
    except (ValueError, OSError):
        return False


def default_system_prompt() -> str:
    from configs.schema import EnvConfig
    return EnvConfig().system_prompt


def _task_traces(job: tuple) -> tuple[list[dict], int]:
    """One task's traces (rows to write) and how many failed: runs in a worker process with its
    own env, so tasks are solved in parallel. Each task draws from its own seeded RNG, so the
    traces are the same whatever the number of workers."""
    task, n_per_task, seed, system_prompt, recoverable, rate, think, env_kwargs = job
    rng = random.Random(f"{seed}/{task.id}")
    env = gymnasium.make("swerve/SWE-v0", **env_kwargs)
    rows, failed = [], 0
    try:
        for _ in range(n_per_task):
            recovery = recoverable and rng.random() < rate
            try:
                trace = solve(env, task, rng, recovery, system_prompt, think)
            except ValueError:
                trace = None
            if trace is None:
                failed += 1
                continue
            rows.append({"messages": trace.messages, "resolved": True, "task_id": task.id,
                         "recovery": trace.recovery, "turns": trace.turns})
    finally:
        env.close()
    return rows, failed


def write_traces(out_file: str, tasks: Optional[Sequence[Task]] = None, n_per_task: int = 2,
                 seed: int = 0, system_prompt: Optional[str] = None,
                 recovery_rate: float = DEFAULT_RECOVERY_RATE, think: bool = True,
                 env_kwargs: Optional[dict] = None, workers: int = 1) -> dict:
    """Write resolved expert traces (JSONL `messages` rows) for every task; returns counts.
    `workers` > 1 plays tasks in that many processes (each trace runs real commands)."""
    started = time.monotonic()
    tasks = list(load_tasks("builtin", "train") if tasks is None else tasks)
    system_prompt = default_system_prompt() if system_prompt is None else system_prompt
    counts = {"tasks": len(tasks), "traces": 0, "resolved": 0, "with_recovery": 0,
              "failed": 0, "mean_turns": 0.0, "seconds": 0.0}
    turns = 0
    out_dir = os.path.dirname(os.path.abspath(out_file))
    os.makedirs(out_dir, exist_ok=True)
    recoverable = {task.id for task in tasks if _has_wrong_edit(task)}
    # Tasks without a plausible wrong edit get none, so the others get more to meet the rate.
    rate = min(1.0, recovery_rate * len(tasks) / len(recoverable)) if recoverable else 0.0
    jobs = [(task, n_per_task, seed, system_prompt, task.id in recoverable, rate, think, dict(env_kwargs or {}))
            for task in tasks]
    if workers > 1 and len(jobs) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # spawn: the caller may hold threads (Ray) that a forked child must not inherit.
        with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_task_traces, jobs, chunksize=max(1, len(jobs) // (4 * workers))))
    else:
        results = [_task_traces(job) for job in jobs]
    with open(out_file, "w") as handle:
        for rows, failed in results:
            counts["failed"] += failed
            for row in rows:
                turns += row.pop("turns")
                handle.write(json.dumps(row) + "\n")
                counts["traces"] += 1
                counts["resolved"] += 1
                counts["with_recovery"] += int(row["recovery"])
    counts["mean_turns"] = round(turns / counts["traces"], 2) if counts["traces"] else 0.0
    counts["seconds"] = round(time.monotonic() - started, 2)
    return counts


def is_valid_reply(reply: str) -> bool:
    return parse_action(reply).kind in ("command", SUBMIT)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.expert", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSONL file to write")
    parser.add_argument("-n", "--n-per-task", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--source", default="builtin")
    parser.add_argument("--split", default="train")
    parser.add_argument("--ids", nargs="*", default=[], help="task ids (default: all of the split)")
    parser.add_argument("--recovery-rate", type=float, default=DEFAULT_RECOVERY_RATE)
    parser.add_argument("--no-think", action="store_true", help="replies without a reasoning line")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes playing traces")
    parser.add_argument("--max-observation-chars", type=int, default=0,
                        help="env observation cap (0: the env's default)")
    args = parser.parse_args(argv)
    tasks = load_tasks(args.source, args.split, args.ids)
    env_kwargs: dict[str, Any] = {}
    if args.max_observation_chars:
        env_kwargs["max_observation_chars"] = args.max_observation_chars
    counts = write_traces(args.out, tasks, args.n_per_task, args.seed,
                          recovery_rate=args.recovery_rate, think=not args.no_think,
                          env_kwargs=env_kwargs, workers=args.workers)
    print(json.dumps(counts))
    return 0 if counts["traces"] else 1


if __name__ == "__main__":
    sys.exit(main())
