"""`swerve eval`: pass@k of the configured policy on a stratified subset of tasks.

Each task gets `eval.attempts` scored attempts at `eval.temperature`, run by episode actors on
local Ray (engines from `EngineSet`, one sandbox lease per episode actor) that take their work
from an `EvalQueue`. An attempt that ends in infra_error is re-run (up to
rollout.max_infra_retries times) and never scored; one that still fails is counted as an
infra_error and left out of its task's n. Writes `eval.json` (pass@1, unbiased pass@k for
k = 1..attempts, per-stratum table, outcome mix) and SWE-bench's `predictions.jsonl`
(instance_id, model_name_or_path, model_patch: the first scored attempt's final diff).
"""
from __future__ import annotations

import collections
import dataclasses
import random
import time
from math import comb
from pathlib import Path
from typing import Optional, Sequence

from actors.report import console, redact
from actors.training.batch_stats import tamper_rate
from actors.report.run_dir import write_json, write_jsonl
from actors.episodes.trajectory import Trajectory
from configs import Config
from configs.schema.rollout import RolloutConfig
from envs.outcomes import Outcome

OUTCOMES = tuple(o.value for o in Outcome)


# -- scoring -------------------------------------------------------------------------------
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task with n scored attempts, c of them resolved:
    1 - C(n-c, k) / C(n, k) (Chen et al. 2021). Needs 1 <= k <= n."""
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n (n={n})")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def mean_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> Optional[float]:
    """Mean pass@k over tasks given (n, c) each; tasks with fewer than k scored attempts are
    left out (None when none has k)."""
    values = [pass_at_k(n, c, k) for n, c in counts if n >= k]
    return sum(values) / len(values) if values else None


# -- task subset ---------------------------------------------------------------------------
def stratified_subset(tasks: Sequence, num_tasks: int, seed: int) -> list:
    """`num_tasks` tasks drawn per stratum in proportion to its size (largest remainder, ties
    by stratum name), the same for the same seed; 0 or >= len(tasks) keeps every task.
    Returned sorted by id."""
    tasks = sorted(tasks, key=lambda t: t.id)
    if num_tasks <= 0 or num_tasks >= len(tasks):
        return tasks
    strata: dict[str, list] = collections.defaultdict(list)
    for task in tasks:
        strata[task.stratum or ""].append(task)
    names = sorted(strata)
    exact = {s: num_tasks * len(strata[s]) / len(tasks) for s in names}
    quota = {s: int(exact[s]) for s in names}
    by_remainder = sorted(names, key=lambda s: (-(exact[s] - quota[s]), -len(strata[s]), s))
    for s in by_remainder[: num_tasks - sum(quota.values())]:
        quota[s] += 1
    picked = []
    for s in names:
        rng = random.Random(f"{seed}/{s}")
        picked.extend(rng.sample(strata[s], quota[s]))
    return sorted(picked, key=lambda t: t.id)


# -- report --------------------------------------------------------------------------------
def progress_figure(p: dict) -> str:
    """The eval's progress line: pass@1 of the attempts scored so far (attempt-weighted: the
    report's pass@1 weighs tasks equally, so the two differ a little)."""
    so_far = f"{p['resolved'] / p['scored']:.2f}" if p["scored"] else "-"
    return f"pass@1 so far {so_far} ({p['scored']} scored, {p['infra_reruns']} infra re-runs)"


def summarize(tasks: Sequence, trajectories: Sequence[Trajectory], attempts: int) -> dict:
    """eval.json's numbers from the final trajectories (infra errors counted, never scored)."""
    by_task: dict[str, list[Trajectory]] = collections.defaultdict(list)
    for traj in trajectories:
        by_task[traj.task_id].append(traj)
    outcome_mix = collections.Counter({o: 0 for o in OUTCOMES})
    per_task, counts = [], []
    strata, families = collections.defaultdict(list), collections.defaultdict(list)
    for task in tasks:
        trajs = sorted(by_task.get(task.id, []), key=lambda t: t.member)
        outcome_mix.update(t.outcome for t in trajs)
        scored = [t for t in trajs if not t.is_infra_error]
        n, c = len(scored), sum(t.outcome == Outcome.RESOLVED.value for t in scored)
        counts.append((n, c))
        strata[task.stratum or ""].append((n, c))
        families[task.family or task.repo].append((n, c))
        per_task.append({"task_id": task.id, "stratum": task.stratum, "family": task.family or task.repo,
                         "n": n, "resolved": c,
                         "infra_error": len(trajs) - n, "outcomes": [t.outcome for t in trajs]})
    ks = range(1, attempts + 1)
    scored_all = [t for t in trajectories if not t.is_infra_error]
    scored_total = sum(n for n, _ in counts)
    return {
        "num_tasks": len(tasks),
        "attempts": attempts,
        "scored_attempts": scored_total,
        # pass@1 = mean over tasks of (resolved / scored attempts) = mean_pass_at_k(k=1).
        "pass@1": mean_pass_at_k(counts, 1),
        "pass@k": {str(k): mean_pass_at_k(counts, k) for k in ks},
        "tasks_scored_for_k": {str(k): sum(n >= k for n, _ in counts) for k in ks},
        "resolved_attempts": sum(c for _, c in counts),
        # Scored attempts that changed a protected path, and which paths (envs/grading/protection.py).
        "tamper_rate": tamper_rate(scored_all) or 0.0,
        "tampered_attempts": [{"task_id": t.task_id, "member": t.member, "paths": t.tampered}
                              for t in scored_all if t.tampered],
        "outcome_mix": dict(outcome_mix),
        "per_stratum": _breakdown(strata, attempts),
        # By kind of bug (the task's family; its repository when the source names none).
        "per_family": _breakdown(families, attempts),
        "per_task": per_task,
    }


def _breakdown(groups: dict[str, list[tuple[int, int]]], attempts: int) -> dict:
    return {name: {"tasks": len(v), "scored_attempts": sum(n for n, _ in v),
                   "resolved_attempts": sum(c for _, c in v), "pass@1": mean_pass_at_k(v, 1),
                   f"pass@{attempts}": mean_pass_at_k(v, attempts)}
            for name, v in sorted(groups.items())}


def predictions(tasks: Sequence, trajectories: Sequence[Trajectory], model_name: str) -> list[dict]:
    """One SWE-bench prediction per task: the first scored attempt's patch (else the first's)."""
    rows = []
    for task in tasks:
        trajs = sorted((t for t in trajectories if t.task_id == task.id), key=lambda t: t.member)
        pick = next((t for t in trajs if not t.is_infra_error), trajs[0] if trajs else None)
        rows.append({"instance_id": task.id, "model_name_or_path": model_name,
                     "model_patch": pick.model_patch if pick else ""})
    return rows


def attempt_records(trajectories: Sequence[Trajectory]) -> list[dict]:
    """attempts.jsonl: every attempt's transcript and outcome (infra errors included), to read
    what a policy does on held-out tasks without re-running it."""
    keys = ("task_id", "member", "attempt", "outcome", "infra_source", "reward", "turns", "started_s", "finished_s",
            "error", "tampered", "unresolved_reason", "test_status", "hidden_status", "grading_problems", "messages",
            "model_patch")
    records = []
    for traj in sorted(trajectories, key=lambda t: (t.task_id, t.member, t.attempt)):
        summary = traj.summary()
        records.append({k: summary[k] for k in keys})
    return records


def _fmt(value: Optional[float]) -> str:
    return "  n/a" if value is None else f"{100 * value:5.1f}%"


def table(report: dict) -> str:
    lines = [f"eval: {report['num_tasks']} tasks x {report['attempts']} attempts "
             f"({report['scored_attempts']} scored, {report['infra_reruns']} infra re-runs)"]
    lines.append("  " + "  ".join(f"pass@{k} {_fmt(v)}" for k, v in report["pass@k"].items()))
    for title, key in (("stratum", "per_stratum"), ("family", "per_family")):
        lines.append(f"  {title:<16}{'tasks':>6}{'scored':>8}{'resolved':>10}{'pass@1':>9}")
        for name, row in report[key].items():
            lines.append(f"  {name or '-':<16}{row['tasks']:>6}{row['scored_attempts']:>8}"
                         f"{row['resolved_attempts']:>10}{_fmt(row['pass@1']):>9}")
    lines.append("  outcomes: " + ", ".join(f"{k} {v}" for k, v in report["outcome_mix"].items()))
    lines.append(f"  tampering (changed protected paths): {len(report['tampered_attempts'])} attempts "
                 f"({_fmt(report['tamper_rate']).strip()})")
    return "\n".join(lines)


# -- the run -------------------------------------------------------------------------------
def out_dir(cfg: Config) -> Path:
    # The evaluation's outputs start here: from now on its logs and prints are redacted too.
    redact.install()
    path = Path(cfg.eval.out_dir).expanduser().resolve() if cfg.eval.out_dir else cfg.run.path
    path.mkdir(parents=True, exist_ok=True)
    return path


def eval_rollout(cfg: Config) -> RolloutConfig:
    """What an eval's episodes sample with: the rollout settings at eval.temperature and eval.max_turns."""
    return dataclasses.replace(cfg.rollout, temperature=cfg.eval.temperature,
                               max_turns=cfg.eval.max_turns or cfg.rollout.max_turns)


def evaluate(cfg: Config) -> dict:
    """Run the evaluation described by cfg.eval on local Ray; returns eval.json's content."""
    from actors.fleet.launch import init_ray, kill, launch_eval, namespace, reap_episodes, start_episodes
    from actors.fleet.remote import RemoteEvalQueue
    from actors.stages.policy_setup import ensure_policy
    from envs.tasks.loaders import load_tasks

    if cfg.eval.attempts < 1:
        raise ValueError(f"eval.attempts is {cfg.eval.attempts}; it must be at least 1")
    started = time.time()
    tasks = stratified_subset(load_tasks(cfg.tasks.source, cfg.eval.split, cfg.tasks.ids, cfg.tasks.format),
                              cfg.eval.num_tasks, cfg.eval.seed)
    if not tasks:
        raise ValueError(f"no tasks in {cfg.tasks.source!r}, split {cfg.eval.split!r}")
    dest = out_dir(cfg)
    init_ray(cfg)
    tokenizer_path, model_path = ensure_policy(cfg)
    ns = f"{namespace(cfg)}-eval"  # apart from a training run of the same name
    rollout = eval_rollout(cfg)
    queue = RemoteEvalQueue.options(name="eval-queue", namespace=ns, num_cpus=0).remote(
        tasks, cfg.eval.attempts, cfg.rollout.max_infra_retries, cfg.eval.seed)
    fleet = launch_eval(cfg, model_path, ns, queue, rollout)
    try:
        start_episodes(fleet, cfg, tokenizer_path, min(cfg.rollout.num_episode_actors, len(tasks) * cfg.eval.attempts))
        bar = console.progress(f"{cfg.run.name} eval", len(tasks) * cfg.eval.attempts, "attempts")
        next_status = time.monotonic() + cfg.run.status_interval_s
        # Dead episode actors are replaced (their attempts re-run as infra errors), as in training.
        while reap_episodes(fleet, cfg) < len(fleet.episode_runs):
            fleet.engine_set.maybe_replace_dead()
            if time.monotonic() >= next_status:
                p = fleet.collector.progress()
                print(f"[swerve] eval: {p['done']}/{p['total']} attempts done, {p['in_flight']} running, "
                      f"{p['infra_reruns']} infra re-runs", flush=True)
                bar.update(p["done"], progress_figure(p))
                next_status += cfg.run.status_interval_s
            time.sleep(cfg.rollout.poll_interval_s * 10)
        trajectories = fleet.collector.results()
        progress = fleet.collector.progress()
        bar.finish(progress_figure(progress))
    finally:
        kill(fleet)
    model_name = cfg.eval.model_name or cfg.model.path or "swerve-tiny"
    report = {
        "model_name_or_path": model_name,
        "tasks_source": cfg.tasks.source,
        "split": cfg.eval.split,
        "temperature": cfg.eval.temperature,
        "seed": cfg.eval.seed,
        **summarize(tasks, trajectories, cfg.eval.attempts),
        "infra_reruns": progress["infra_reruns"],
        "wall_s": round(time.time() - started, 2),
    }
    write_json(dest / "eval.json", report)
    write_jsonl(dest / "predictions.jsonl", predictions(tasks, trajectories, model_name))
    write_jsonl(dest / "attempts.jsonl", attempt_records(trajectories))
    report["out_dir"] = str(dest)
    return report
