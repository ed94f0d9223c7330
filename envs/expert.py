"""Scripted expert traces for SFT: solve tasks through the real env, keep the resolved ones.

The expert plans an agent's replies from a task's gold patch (envs/tasks/expert_plan.py): run the
failing tests, look at the function, fix the line with `sed`, re-run the tests, `submit`. A
seeded fraction of traces (pipeline.recovery_rate) includes a failure and its recovery
(LEARNING.md): a plausible wrong edit, the failing test output, re-inspection of the line, the
correct fix, passing tests, submit.

Every trace is played for real in the env a run plays (`envs.make.make_env` with the run's
env, sandbox and tasks sections; its own LocalSandbox); observations are the env's, and only
episodes that end resolved are written. Rows are OpenAI-style `messages` JSONL that
`policies.training.sft.read_traces` / `run_sft` read.

    python -m envs.expert --out traces.jsonl -n 2 --seed 0
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Sequence

from configs.schema import EnvConfig, PipelineConfig, RunConfig, SandboxConfig, SWEEnvConfig, TasksConfig
from envs.tasks.expert_plan import has_wrong_edit, parse_gold_patch, plan_trace, read_lines, wrong_lines
from envs.tasks.loaders import load_tasks
from envs.make import make_env
from envs.swe_env import SWEEnv
from envs.tasks.task import Task

# Wrong edits tried for a recovery trace before settling for a plain one: most tasks have a
# wrong edit whose failing test the trace can show within the first few.
WRONG_EDITS_TRIED = 4


@dataclass
class Trace:
    task_id: str
    messages: list = field(default_factory=list)
    resolved: bool = False
    recovery: bool = False
    turns: int = 0


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
          think: bool) -> Optional[Trace]:
    """One resolved trace for the task (with recovery if asked and possible), or None."""
    if recovery:
        fix = parse_gold_patch(task.gold_patch)
        candidates = wrong_lines(fix, read_lines(task, fix.path))
        rng.shuffle(candidates)
        for wrong in candidates[:WRONG_EDITS_TRIED]:
            trace = run_trace(env, task, plan_trace(task, rng, wrong, think), system_prompt, True)
            if trace is not None:
                return trace
    return run_trace(env, task, plan_trace(task, rng, None, think), system_prompt, False)


@dataclass(frozen=True)
class _Job:
    """One task's share of write_traces, sent to a worker process."""
    task: Task
    traces: int
    seed: int
    recoverable: bool
    # The recovery share for recoverable tasks (raised so the whole set meets the configured rate).
    recovery_rate: float
    thoughts: bool
    env: EnvConfig
    sandbox: SandboxConfig


def _task_traces(job: _Job) -> tuple[list[dict], int]:
    """One task's traces (rows to write) and how many failed: runs in a worker process with its
    own env, so tasks are solved in parallel. Each task draws from its own seeded RNG, so the
    traces are the same whatever the number of workers."""
    rng = random.Random(f"{job.seed}/{job.task.id}")
    env = make_env(job.env, job.sandbox)
    if not isinstance(env.unwrapped, SWEEnv):
        env.close()
        raise ValueError(f"expert traces are played in swerve/SWE-v0; env.id is {job.env.id!r}")
    rows, failed = [], 0
    try:
        for _ in range(job.traces):
            recovery = job.recoverable and rng.random() < job.recovery_rate
            try:
                trace = solve(env, job.task, rng, recovery, job.env.system_prompt, job.thoughts)
            except ValueError:
                trace = None
            if trace is None:
                failed += 1
                continue
            rows.append({"messages": trace.messages, "resolved": True, "task_id": job.task.id,
                         "recovery": trace.recovery, "turns": trace.turns})
    finally:
        env.close()
    return rows, failed


def write_traces(out_file: str, tasks: Sequence[Task], pipeline: PipelineConfig, env: EnvConfig,
                 sandbox: SandboxConfig, seed: int, on_task: Optional[Callable[[int, int], None]] = None) -> dict:
    """Write resolved expert traces (JSONL `messages` rows) for every task; returns counts.

    From `pipeline`: traces_per_task, recovery_rate, expert_thoughts and trace_workers (> 1 plays
    tasks in that many processes, each trace running real commands; 0: one per CPU). The env is
    the run's (`env`, `sandbox`), so a trace's observations are those an RL episode would see.
    on_task(tasks done, traces resolved so far) as each task's traces are in (a progress line)."""
    started = time.monotonic()
    counts = {"tasks": len(tasks), "traces": 0, "resolved": 0, "with_recovery": 0,
              "failed": 0, "mean_turns": 0.0, "seconds": 0.0}
    out_dir = os.path.dirname(os.path.abspath(out_file))
    os.makedirs(out_dir, exist_ok=True)
    recoverable = {task.id for task in tasks if has_wrong_edit(task)}
    # Tasks without a plausible wrong edit get none, so the others get more to meet the rate.
    rate = min(1.0, pipeline.recovery_rate * len(tasks) / len(recoverable)) if recoverable else 0.0
    jobs = [_Job(task, pipeline.traces_per_task, seed, task.id in recoverable, rate, pipeline.expert_thoughts,
                 env, sandbox) for task in tasks]
    workers = pipeline.trace_workers or os.cpu_count() or 1
    if workers > 1 and len(jobs) > 1:
        # spawn: the caller may hold threads (Ray) that a forked child must not inherit.
        with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=multiprocessing.get_context("spawn")) as pool:
            _write(out_file, pool.map(_task_traces, jobs, chunksize=max(1, len(jobs) // (4 * workers))), counts, on_task)
    else:
        _write(out_file, map(_task_traces, jobs), counts, on_task)
    counts["seconds"] = round(time.monotonic() - started, 2)
    return counts


def _write(out_file: str, results: Iterable[tuple[list[dict], int]], counts: dict,
           on_task: Optional[Callable[[int, int], None]]) -> None:
    """Each task's traces as they come (in task order), counted into `counts`."""
    turns = 0
    with open(out_file, "w") as handle:
        for done, (rows, failed) in enumerate(results, 1):
            counts["failed"] += failed
            for row in rows:
                turns += row.pop("turns")
                handle.write(json.dumps(row) + "\n")
                counts["traces"] += 1
                counts["resolved"] += 1
                counts["with_recovery"] += int(row["recovery"])
            if on_task is not None:
                on_task(done, counts["resolved"])
    counts["mean_turns"] = round(turns / counts["traces"], 2) if counts["traces"] else 0.0


def main(argv: Optional[Sequence[str]] = None) -> int:
    # Defaults are the config's (configs/schema/): this CLI is the pipeline's SFT-trace stage alone.
    pipeline, tasks, swe = PipelineConfig(), TasksConfig(), SWEEnvConfig()
    parser = argparse.ArgumentParser(prog="python -m envs.expert", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSONL file to write")
    parser.add_argument("-n", "--n-per-task", type=int, default=pipeline.traces_per_task)
    parser.add_argument("--seed", type=int, default=RunConfig().seed)
    parser.add_argument("--source", default=tasks.source)
    parser.add_argument("--split", default=tasks.split)
    parser.add_argument("--ids", nargs="*", default=[], help="task ids (default: all of the split)")
    parser.add_argument("--recovery-rate", type=float, default=pipeline.recovery_rate)
    parser.add_argument("--no-think", action="store_true", help="replies without a reasoning line")
    parser.add_argument("--workers", type=int, default=pipeline.trace_workers,
                        help="processes playing traces (0: one per CPU)")
    parser.add_argument("--max-observation-chars", type=int, default=swe.max_observation_chars,
                        help="env observation cap")
    args = parser.parse_args(argv)
    counts = write_traces(
        args.out, load_tasks(args.source, args.split, args.ids),
        dataclasses.replace(pipeline, traces_per_task=args.n_per_task, recovery_rate=args.recovery_rate,
                            expert_thoughts=not args.no_think, trace_workers=args.workers),
        EnvConfig(swe=dataclasses.replace(swe, max_observation_chars=args.max_observation_chars)),
        SandboxConfig(), args.seed)
    print(json.dumps(counts))
    return 0 if counts["traces"] else 1


if __name__ == "__main__":
    sys.exit(main())
