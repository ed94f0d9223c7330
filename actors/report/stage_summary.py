"""What `swerve pipeline` reports at its end: summary.json, the printed table, learning_curve.png
and, when the RL stage was evaluated along the way, rl_curve.png.

Each stage's pass@1 carries its bootstrap interval over tasks; each stage is compared with the one
before it task by task (paired), and each RL point with SFT (actors/report/significance.py).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Sequence

from actors.report import console, fix_patterns
from actors.report.run_dir import write_json
from actors.report.significance import paired_delta, paired_delta_by_family, per_task_pass_at_1, stage_interval
from configs import Config


def summarize(cfg: Config, root: Path, reports: dict[str, dict], rl_points: Sequence[int] = ()) -> dict:
    """summary.json, learning_curve.png (and rl_curve.png) under `root`, and the printed table.
    `rl_points`: the RL stage's intermediate eval steps (their evals in rl/at-step-<n>/)."""
    last = list(reports)[-1]
    shutil.copy(root / last / "predictions.jsonl", root / "predictions.jsonl")
    seed = cfg.eval.seed
    # A stage none of whose tasks was scored (every attempt an infra error) has no interval and
    # no delta: the summary says so instead of the pipeline failing after all its work.
    scored = {stage for stage, report in reports.items() if per_task_pass_at_1(report)}
    intervals = {stage: stage_interval(report, seed=seed) if stage in scored else None
                 for stage, report in reports.items()}
    stages = list(reports)
    # Each stage against the one before it, paired task by task (actors/report/significance.py).
    deltas = {f"{after}_minus_{before}": paired_delta(reports[before], reports[after], seed=seed)
              if set(per_task_pass_at_1(reports[before])) & set(per_task_pass_at_1(reports[after])) else None
              for before, after in zip(stages, stages[1:])}
    # The same per family: a gain overall can hide a family that fell (off_by_one did in every
    # pass-rate-admission run of issue 39).
    by_family = {f"{after}_minus_{before}_by_family": paired_delta_by_family(reports[before], reports[after], seed=seed)
                 for before, after in zip(stages, stages[1:]) if deltas[f"{after}_minus_{before}"] is not None}
    curve = rl_curve(root, cfg, reports, rl_points)
    summary = {
        **{f"{stage}_pass_at_1": report["pass@1"] for stage, report in reports.items()},
        **deltas,
        **{name: d for name, d in by_family.items() if d},
        "pass_at_1_by_family": {stage: {family: row["pass@1"] for family, row in report.get("per_family", {}).items()}
                                for stage, report in reports.items()},
        **({"rl_curve": curve} if curve else {}),
        "pass_at_1_ci95": {stage: [i["ci95_low"], i["ci95_high"]] if i else None for stage, i in intervals.items()},
        "pass_at_k": {stage: report["pass@k"] for stage, report in reports.items()},
        "attempts_per_task": cfg.eval.attempts,
        "eval_tasks": reports[last]["num_tasks"],
        "eval_temperature": cfg.eval.temperature,
        "stages": stages,
    }
    write_json(root / "summary.json", summary)
    _plot(reports, intervals, deltas, cfg.eval.attempts, root / "learning_curve.png")
    if curve:
        _plot_curve(curve, root / "rl_curve.png")
    console.say(summary_table(summary))
    _write_fix_patterns(root, stages)
    return summary


def _write_fix_patterns(root: Path, stages: Sequence[str]) -> None:
    """fix_patterns.json and its table when the tasks' issues name their fix (micro tasks)."""
    by_stage = {stage: fix_patterns.stage_fix_patterns(root / stage) for stage in stages
                if (root / stage / "attempts.jsonl").is_file() and (root / stage / "eval.json").is_file()}
    by_stage = {stage: patterns for stage, patterns in by_stage.items() if patterns}
    if by_stage:
        write_json(root / "fix_patterns.json", by_stage)
        console.say(fix_patterns.table(by_stage))


def rl_curve(root: Path, cfg: Config, reports: dict[str, dict], rl_points: Sequence[int]) -> list[dict]:
    """The RL stage's held-out evals (pipeline.rl_eval_steps, then its end), each against SFT
    (paired over tasks): does the gain grow, hold or fade with more updates?"""
    if "rl" not in reports or not rl_points:
        return []
    evals = [(point, json.loads((root / "rl" / f"at-step-{point}" / "eval.json").read_text()))
             for point in rl_points]
    evals.append((cfg.trainer.total_steps, reports["rl"]))
    sft = reports.get("sft")
    curve = []
    for step, report in evals:
        point = {"step": step, "pass@1": report["pass@1"]}
        if sft is not None and set(per_task_pass_at_1(sft)) & set(per_task_pass_at_1(report)):
            point["minus_sft"] = paired_delta(sft, report, seed=cfg.eval.seed)
        curve.append(point)
    return curve

def _pct(value: float) -> str:
    return f"{100 * value:5.1f}%"


def summary_table(summary: dict) -> str:
    """The printed result: each stage's pass@1 with its 95% interval, then each stage-to-stage
    delta (paired over tasks) with its own."""
    k = summary["attempts_per_task"]
    lines = [f"stage | pass@1 [95% CI]         | pass@{k}  | {summary['eval_tasks']} tasks x {k} attempts"]
    for stage in summary["stages"]:
        interval = summary["pass_at_1_ci95"][stage]
        shown = f"[{_pct(interval[0])}, {_pct(interval[1])}]" if interval else "(no task scored)"
        at_k = summary["pass_at_k"][stage].get(str(k))  # a cheaper base eval may have fewer attempts
        lines.append(f"{stage:5} | {_pct(summary[f'{stage}_pass_at_1'])} {shown} "
                     f"| {_pct(at_k) if at_k is not None else '   n/a'}")
    for before, after in zip(summary["stages"], summary["stages"][1:]):
        d = summary[f"{after}_minus_{before}"]
        if d is None:
            lines.append(f"{after} - {before}: no task scored in both stages, no delta")
            continue
        lines.append(f"{after} - {before}: {_delta(d)}")
    lines += _family_table(summary)
    for point in summary.get("rl_curve", []):
        d = point.get("minus_sft")
        lines.append(f"rl at step {point['step']:3}: pass@1 {_pct(point['pass@1'])}"
                     + (f", rl - sft: {_delta(d)}" if d else ""))
    return "\n".join(lines)


def _family_table(summary: dict) -> list[str]:
    """The last stage against the one before it, family by family, and which families fell (their
    whole interval below zero)."""
    stages = summary["stages"]
    if len(stages) < 2 or f"{stages[-1]}_minus_{stages[-2]}_by_family" not in summary:
        return []
    before, after = stages[-2], stages[-1]
    deltas = summary[f"{after}_minus_{before}_by_family"]
    rates = summary["pass_at_1_by_family"]
    lines = [f"{'family':12} | {before:>6} | {after:>6} | {after} - {before} [95% CI]"]
    for family, d in deltas.items():
        shown = [_pct(rates[stage][family]) if rates[stage].get(family) is not None else "   n/a"
                 for stage in (before, after)]
        lines.append(f"{family:12} | {shown[0]} | {shown[1]} | "
                     f"{100 * d['delta']:+6.1f} [{100 * d['ci95_low']:+.1f}, {100 * d['ci95_high']:+.1f}]")
    fell = [family for family, d in deltas.items() if d["ci95_high"] < 0]
    lines.append(f"families that fell ({after} < {before}, whole interval below 0): {', '.join(fell) or 'none'}")
    return lines


def _delta(d: dict) -> str:
    return (f"{100 * d['delta']:+.1f} points [{100 * d['ci95_low']:+.1f}, {100 * d['ci95_high']:+.1f}] "
            f"(paired bootstrap, {d['tasks']} tasks: {d['better']} better, {d['worse']} worse)")


def _plot(reports: dict[str, dict], intervals: dict[str, dict], deltas: dict[str, dict], k: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    stages = list(reports)
    values = [reports[s]["pass@1"] for s in stages]
    errors = [[v - intervals[s]["ci95_low"] if intervals[s] else 0.0 for s, v in zip(stages, values)],
              [intervals[s]["ci95_high"] - v if intervals[s] else 0.0 for s, v in zip(stages, values)]]
    ax.errorbar(stages, values, yerr=errors, marker="o", capsize=4, label="pass@1 (95% CI)")
    at_k = [s for s in stages if str(k) in reports[s]["pass@k"]]
    ax.plot(at_k, [reports[s]["pass@k"][str(k)] for s in at_k], marker="s", linestyle="--", label=f"pass@{k}")
    for i, (before, after) in enumerate(zip(stages, stages[1:])):
        d = deltas[f"{after}_minus_{before}"]
        if d is None:
            continue
        ax.annotate(f"{100 * d['delta']:+.1f}\n[{100 * d['ci95_low']:+.1f}, {100 * d['ci95_high']:+.1f}]",
                    ((i + i + 1) / 2, (values[i] + values[i + 1]) / 2 + 0.08), ha="center", fontsize="x-small")
    ax.set(xlabel="stage", ylabel="held-out pass rate", ylim=(0, 1),
           title=f"Learning curve ({reports[stages[-1]]['num_tasks']} held-out tasks)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _plot_curve(curve: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    points = [p for p in curve if "minus_sft" in p]
    steps = [p["step"] for p in points]
    ax.errorbar(steps, [100 * p["minus_sft"]["delta"] for p in points],
                yerr=[[100 * (p["minus_sft"]["delta"] - p["minus_sft"]["ci95_low"]) for p in points],
                      [100 * (p["minus_sft"]["ci95_high"] - p["minus_sft"]["delta"]) for p in points]],
                marker="o", capsize=4, label="rl - sft (paired, 95% CI)")
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set(xlabel="RL step", ylabel="held-out pass@1 gain over SFT (points)", title="RL gain along the run")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
