"""`swerve pipeline`: the reference run's story in miniature, one stage after another.

    base eval  ->  SFT on expert traces  ->  eval  ->  async GRPO from the SFT policy  ->  eval

Each stage writes under runs/<run.name>/<stage>/; the run directory gets summary.json, the
RL stage's predictions.jsonl and learning_curve.png.
"""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Sequence

from actors.report.run_dir import write_json
from actors.report.significance import paired_delta, stage_interval
from configs import Config


def _stage_cfg(cfg: Config, stage: str, model_path: str, task_ids: Sequence[str] = ()) -> Config:
    base = Path(cfg.run.dir).expanduser().resolve() / cfg.run.name
    return dataclasses.replace(
        cfg,
        run=dataclasses.replace(cfg.run, dir=str(base), name=stage),
        model=dataclasses.replace(cfg.model, path=model_path),
        tokenizer=dataclasses.replace(cfg.tokenizer, path=model_path or cfg.tokenizer.path),
        tasks=dataclasses.replace(cfg.tasks, ids=list(task_ids or cfg.tasks.ids)),
        eval=dataclasses.replace(cfg.eval, out_dir=str(base / stage)),
    )


def rl_task_ids(train_ids: Sequence[str], traced_ids: Sequence[str], unseen_only: bool) -> list[str]:
    """The RL stage's task pool: with `unseen_only`, the training tasks SFT had no trace of (so RL
    is rewarded for solving, not for recalling a memorised trace); else every training task."""
    if not unseen_only:
        return list(train_ids)
    traced = set(traced_ids)
    pool = [task_id for task_id in train_ids if task_id not in traced]
    if not pool:
        raise ValueError("pipeline.rl_on_unseen_tasks is true but every training task has an expert trace: "
                         "lower pipeline.trace_tasks or set pipeline.rl_on_unseen_tasks=false")
    return pool


def run_pipeline(cfg: Config) -> dict:
    from actors.driver import train
    from actors.evaluate import evaluate
    from actors.policy_setup import ensure_policy
    from envs.expert import write_traces
    from envs.loaders import load_tasks
    from policies.sft import run_sft

    root = Path(cfg.run.dir).expanduser().resolve() / cfg.run.name
    root.mkdir(parents=True, exist_ok=True)
    tokenizer_path, base_model = ensure_policy(cfg)
    reports: dict[str, dict] = {}
    policy = base_model
    train_ids = [t.id for t in load_tasks(cfg.tasks.source, cfg.tasks.split, cfg.tasks.ids)]
    traced_ids: list[str] = []
    for stage in cfg.pipeline.stages:
        if stage == "sft":
            traces = root / "sft" / "traces.jsonl"
            traces.parent.mkdir(parents=True, exist_ok=True)
            train_tasks = load_tasks(cfg.tasks.source, cfg.tasks.split, cfg.tasks.ids)
            train_tasks = train_tasks[: cfg.pipeline.trace_tasks or len(train_tasks)]
            traced_ids = [t.id for t in train_tasks]
            counts = write_traces(str(traces), train_tasks, cfg.pipeline, cfg.env, cfg.sandbox, cfg.run.seed)
            print(f"[swerve] pipeline: {counts['resolved']} expert traces ({counts['with_recovery']} with recovery)",
                  flush=True)
            policy = str(root / "sft" / "policy")
            run_sft(base_model, cfg.tokenizer.path or tokenizer_path, str(traces), policy,
                    dataclasses.replace(cfg.sft, data=str(traces), out_dir=policy))
        elif stage == "rl":
            pool = rl_task_ids(train_ids, traced_ids, cfg.pipeline.rl_on_unseen_tasks)
            print(f"[swerve] pipeline: RL on {len(pool)} training tasks"
                  + (" that SFT never saw" if cfg.pipeline.rl_on_unseen_tasks and traced_ids else ""), flush=True)
            run_path = train(_stage_cfg(cfg, "rl", policy, pool))
            policy = str(run_path / "policy")
        elif stage != "base":
            raise ValueError(f"pipeline.stages has '{stage}'; allowed: base, sft, rl")
        reports[stage] = evaluate(_stage_cfg(cfg, stage, policy if stage != "base" else cfg.model.path))
        print(f"[swerve] pipeline: {stage} pass@1 = {reports[stage]['pass@1']}", flush=True)
    return _summarize(cfg, root, reports)


def _summarize(cfg: Config, root: Path, reports: dict[str, dict]) -> dict:
    last = list(reports)[-1]
    shutil.copy(root / last / "predictions.jsonl", root / "predictions.jsonl")
    seed = cfg.eval.seed
    intervals = {stage: stage_interval(report, seed=seed) for stage, report in reports.items()}
    stages = list(reports)
    # Each stage against the one before it, paired task by task (actors/report/significance.py).
    deltas = {f"{after}_minus_{before}": paired_delta(reports[before], reports[after], seed=seed)
              for before, after in zip(stages, stages[1:])}
    summary = {
        **{f"{stage}_pass_at_1": report["pass@1"] for stage, report in reports.items()},
        **deltas,
        "pass_at_1_ci95": {stage: [i["ci95_low"], i["ci95_high"]] for stage, i in intervals.items()},
        "pass_at_k": {stage: report["pass@k"] for stage, report in reports.items()},
        "attempts_per_task": cfg.eval.attempts,
        "eval_tasks": reports[last]["num_tasks"],
        "eval_temperature": cfg.eval.temperature,
        "stages": stages,
    }
    write_json(root / "summary.json", summary)
    _plot(reports, intervals, deltas, root / "learning_curve.png")
    print(summary_table(summary))
    return summary


def _pct(value: float) -> str:
    return f"{100 * value:5.1f}%"


def summary_table(summary: dict) -> str:
    """The printed result: each stage's pass@1 with its 95% interval, then each stage-to-stage
    delta (paired over tasks) with its own."""
    k = summary["attempts_per_task"]
    lines = [f"stage | pass@1 [95% CI]         | pass@{k}  | {summary['eval_tasks']} tasks x {k} attempts"]
    for stage in summary["stages"]:
        low, high = summary["pass_at_1_ci95"][stage]
        lines.append(f"{stage:5} | {_pct(summary[f'{stage}_pass_at_1'])} [{_pct(low)}, {_pct(high)}] "
                     f"| {_pct(summary['pass_at_k'][stage][str(k)])}")
    for before, after in zip(summary["stages"], summary["stages"][1:]):
        d = summary[f"{after}_minus_{before}"]
        lines.append(f"{after} - {before}: {100 * d['delta']:+.1f} points [{100 * d['ci95_low']:+.1f}, "
                     f"{100 * d['ci95_high']:+.1f}] (paired bootstrap, {d['tasks']} tasks: "
                     f"{d['better']} better, {d['worse']} worse)")
    return "\n".join(lines)


def _plot(reports: dict[str, dict], intervals: dict[str, dict], deltas: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    stages = list(reports)
    values = [reports[s]["pass@1"] for s in stages]
    errors = [[v - intervals[s]["ci95_low"] for s, v in zip(stages, values)],
              [intervals[s]["ci95_high"] - v for s, v in zip(stages, values)]]
    ax.errorbar(stages, values, yerr=errors, marker="o", capsize=4, label="pass@1 (95% CI)")
    k = max(int(key) for key in reports[stages[0]]["pass@k"])
    ax.plot(stages, [reports[s]["pass@k"][str(k)] for s in stages], marker="s", linestyle="--",
            label=f"pass@{k}")
    for i, (before, after) in enumerate(zip(stages, stages[1:])):
        d = deltas[f"{after}_minus_{before}"]
        ax.annotate(f"{100 * d['delta']:+.1f}\n[{100 * d['ci95_low']:+.1f}, {100 * d['ci95_high']:+.1f}]",
                    ((i + i + 1) / 2, (values[i] + values[i + 1]) / 2 + 0.08), ha="center", fontsize="x-small")
    ax.set(xlabel="stage", ylabel="held-out pass rate", ylim=(0, 1),
           title=f"Learning curve ({reports[stages[-1]]['num_tasks']} held-out tasks)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
