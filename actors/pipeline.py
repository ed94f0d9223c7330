"""`swerve pipeline`: the reference run's story in miniature, one stage after another.

    base eval  ->  SFT on expert traces  ->  eval  ->  async GRPO from the SFT policy  ->  eval

Each stage writes under runs/<run.name>/<stage>/; the run directory gets summary.json, the
RL stage's predictions.jsonl and learning_curve.png.

Re-running continues. A stage that finished leaves `<stage>/done.json`, written atomically and
last: what it produced and the fingerprint of the config it depends on (`stage_fingerprints`).
A stage whose marker matches is skipped (its eval.json is read back for the summary); the first
one whose marker is missing or differs runs again from an empty directory, and so does every
stage after it, since their inputs may change. The RL stage, killed before its marker, goes on
from its newest checkpoint (run.resume) when that checkpoint was made with this config.
`pipeline.fresh=true` runs every stage again.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

from actors.report import console
from actors.report.loggers import RunLoggers
from actors.report.run_dir import write_json
from actors.report.significance import paired_delta, per_task_pass_at_1, stage_interval
from configs import Config, flat_config

STAGES = ("base", "sft", "rl")
# A finished stage's completion marker, and the RL stage's record of the config its checkpoints
# were made with (written before its first checkpoint).
MARKER = "done.json"
STARTED = "started.json"
# Keys that say where a run's files and processes go, or how often it saves, not what any stage
# computes: changing them reuses every finished stage (fnmatch patterns over dotted keys).
NOT_FINGERPRINTED = (
    "run.name", "run.dir", "run.resume", "run.status_interval_s", "run.trajectories_per_step",
    "model.cache_dir", "tokenizer.cache_dir", "eval.out_dir", "ray.*",
    "trainer.checkpoint_*", "trainer.keep_checkpoints", "pipeline.fresh", "pipeline.stages",
)
# What a stage never reads: the base eval knows nothing of training, SFT nothing of RL. Changing
# those keys leaves the stage's result as it was. (Which stages come before a stage enters its
# fingerprint through the fingerprint of the one before it.)
UNREAD_BY_STAGE = {
    "base": ("trainer.*", "sft.*", "pipeline.*"),
    "sft": ("trainer.*", "pipeline.rl_on_unseen_tasks"),
    "rl": (),
}
FRESH_HINT = "pipeline.fresh=true runs every stage again"


def _stage_cfg(cfg: Config, stage: str, model_path: str, task_ids: Sequence[str] = (),
               resume: bool = False) -> Config:
    base = cfg.run.path
    return dataclasses.replace(
        cfg,
        run=dataclasses.replace(cfg.run, dir=str(base), name=stage, resume=resume),
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


# -- what a stage depends on -----------------------------------------------------------------
def stage_config(cfg: Config, stage: str) -> dict[str, Any]:
    """The keys whose values a stage's result depends on."""
    left_out = NOT_FINGERPRINTED + UNREAD_BY_STAGE[stage]
    return {key: value for key, value in flat_config(cfg).items()
            if not any(fnmatch.fnmatchcase(key, pattern) for pattern in left_out)}


def check_stages(stages: Sequence[str]) -> None:
    for stage in stages:
        if stage not in STAGES:
            raise ValueError(f"pipeline.stages has '{stage}'; allowed: {', '.join(STAGES)}")
    if len(set(stages)) != len(stages):
        raise ValueError(f"pipeline.stages {list(stages)} names a stage twice; each writes its own directory")


def stage_fingerprints(cfg: Config) -> dict[str, str]:
    """stage -> sha256 of its config (`stage_config`) and of the fingerprint of the stage before
    it, so a change that reruns a stage changes the fingerprint of every stage after it."""
    check_stages(cfg.pipeline.stages)
    fingerprints: dict[str, str] = {}
    previous: Optional[str] = None
    for stage in cfg.pipeline.stages:
        blob = json.dumps({"stage": stage, "after": previous, "config": stage_config(cfg, stage)}, sort_keys=True)
        previous = fingerprints[stage] = hashlib.sha256(blob.encode()).hexdigest()
    return fingerprints


# -- what this invocation does with each stage -----------------------------------------------
@dataclasses.dataclass
class StagePlan:
    stage: str
    # "skip": finished with this config, outputs reused; "resume": the RL stage goes on from its
    # newest checkpoint; "run": from an empty directory.
    action: Literal["skip", "resume", "run"]
    fingerprint: str
    # Printed before the stage: why it is skipped, resumed or run again ("" for a first run).
    note: str = ""
    # The stage's completion marker when it is skipped.
    marker: Optional[dict] = None


def _changed_keys(old: dict, new: dict, shown: int = 3) -> str:
    changed = sorted(key for key in set(old) | set(new) if old.get(key) != new.get(key))
    listed = ", ".join(f"{key}: {old.get(key)!r} -> {new.get(key)!r}" for key in changed[:shown])
    return listed + (f" and {len(changed) - shown} more" if len(changed) > shown else "")


def _mismatch(record: dict, fingerprint: str, config: dict) -> str:
    """Why a marker (or the RL stage's started record) is not this config's; "" when it is."""
    if record.get("fingerprint") == fingerprint:
        return ""
    changed = _changed_keys(record.get("config", {}), config)
    return f"the config changed ({changed})" if changed else "the stages before it changed"


def _read_record(path: Path) -> tuple[Optional[dict], str]:
    """A marker or started record, or None and why not. Both are written atomically, so an
    unreadable one was damaged from outside: not trusted, the stage runs again."""
    if not path.is_file():
        return None, f"it did not finish ({path.name} is missing)"
    try:
        return json.loads(path.read_text()), ""
    except json.JSONDecodeError as err:
        return None, f"{path} is not valid JSON ({err})"


def plan_stages(root: Path, cfg: Config) -> list[StagePlan]:
    """What each stage does this time, from the markers and checkpoints under `root`: stages
    whose markers match are skipped up to the first that does not; that one and every later
    one run (the RL stage resumes instead when it was killed with a checkpoint of this config)."""
    from policies.checkpoint import latest_checkpoint

    fingerprints = stage_fingerprints(cfg)
    plans: list[StagePlan] = []
    redo = "pipeline.fresh=true" if cfg.pipeline.fresh else ""  # once set, every later stage runs
    for stage in cfg.pipeline.stages:
        fingerprint, stage_dir, config = fingerprints[stage], root / stage, stage_config(cfg, stage)
        if redo:
            plans.append(StagePlan(stage, "run", fingerprint, f"runs again: {redo}" if stage_dir.exists() else ""))
            continue
        marker, why = _read_record(stage_dir / MARKER)
        if marker is not None:
            why = _mismatch(marker, fingerprint, config)
            missing = [rel for rel in marker["outputs"].values() if not (root / rel).exists()]
            if not why and missing:
                why = f"{', '.join(missing)} listed in its {MARKER} is gone"
            if not why:
                plans.append(StagePlan(stage, "skip", fingerprint, marker=marker))
                continue
        redo = f"{stage} before it runs again"
        checkpoint = latest_checkpoint(str(stage_dir / "checkpoints")) if stage == "rl" else None
        if checkpoint is not None and marker is None:
            started, unread = _read_record(stage_dir / STARTED)
            changed = unread or _mismatch(started or {}, fingerprint, config)
            if not changed:
                plans.append(StagePlan(stage, "resume", fingerprint,
                                       f"resumes from its newest checkpoint ({Path(checkpoint).relative_to(root)}), "
                                       "made with this config; pipeline.fresh=true starts it over"))
                continue
            why = f"its checkpoints are not this config's: {changed}"
        plans.append(StagePlan(stage, "run", fingerprint, f"runs again from the start: {why}" if stage_dir.exists()
                               else ""))
    return plans


def _record(plan: StagePlan, cfg: Config, fingerprints: dict[str, str]) -> dict:
    stages = list(cfg.pipeline.stages)
    index = stages.index(plan.stage)
    return {"stage": plan.stage, "fingerprint": plan.fingerprint,
            "after": fingerprints[stages[index - 1]] if index else None,
            "config": stage_config(cfg, plan.stage)}


def _load_report(root: Path, stage: str, marker: dict) -> dict:
    report = json.loads((root / marker["outputs"]["eval"]).read_text())
    report["out_dir"] = str(root / stage)
    return report


def run_pipeline(cfg: Config) -> dict:
    root = cfg.run.path
    root.mkdir(parents=True, exist_ok=True)
    plans = plan_stages(root, cfg)  # before any work: a stage name that does not exist fails here
    loggers = RunLoggers(cfg, root)  # each stage's eval as a point of the learning curve
    try:
        return _run_stages(cfg, root, plans, loggers)
    finally:
        loggers.close()


def _run_stages(cfg: Config, root: Path, plans: list, loggers: RunLoggers) -> dict:
    from actors.driver import train
    from actors.evaluate import evaluate
    from actors.policy_setup import ensure_policy
    from envs.expert import write_traces
    from envs.loaders import load_tasks
    from policies.sft import run_sft

    fingerprints = {plan.stage: plan.fingerprint for plan in plans}
    tokenizer_path, base_model = ensure_policy(cfg)
    reports: dict[str, dict] = {}
    policy = base_model
    train_ids = [t.id for t in load_tasks(cfg.tasks.source, cfg.tasks.split, cfg.tasks.ids)]
    traced_ids: list[str] = []
    for index, plan in enumerate(plans):
        stage, stage_dir = plan.stage, root / plan.stage
        if plan.action == "skip":
            assert plan.marker is not None
            outputs = plan.marker["outputs"]
            reports[stage] = _load_report(root, stage, plan.marker)
            policy = str(root / outputs["policy"]) if "policy" in outputs else policy
            traced_ids = plan.marker.get("traced_task_ids", traced_ids)
            loggers.log_eval(stage, index, reports[stage])
            console.say(f"pipeline: {stage} skipped: it finished earlier with this config "
                        f"({stage}/{MARKER}), pass@1 = {reports[stage]['pass@1']} read from {outputs['eval']}; "
                        f"{FRESH_HINT}")
            continue
        if plan.note:
            console.say(f"pipeline: {stage} {plan.note}")
        if plan.action == "run" and stage_dir.exists():
            shutil.rmtree(stage_dir)  # what a killed or outdated attempt left is never taken as done
        stage_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        marker = _record(plan, cfg, fingerprints)
        outputs: dict[str, str] = {}
        if stage == "sft":
            traces = stage_dir / "traces.jsonl"
            train_tasks = load_tasks(cfg.tasks.source, cfg.tasks.split, cfg.tasks.ids)
            train_tasks = train_tasks[: cfg.pipeline.trace_tasks or len(train_tasks)]
            traced_ids = [t.id for t in train_tasks]
            bar = console.progress("sft traces", len(train_tasks), "tasks")
            counts = write_traces(str(traces), train_tasks, cfg.pipeline, cfg.env, cfg.sandbox, cfg.run.seed,
                                  on_task=lambda done, resolved: bar.update(done, f"{resolved} traces resolved"))
            bar.finish()
            console.say(f"pipeline: {counts['resolved']} expert traces ({counts['with_recovery']} with recovery)")
            policy = str(stage_dir / "policy")
            sft_cfg = dataclasses.replace(cfg.sft, data=str(traces), out_dir=policy)
            bar = console.progress("sft train", 0, "steps")  # its size is known once the traces are read
            run_sft(base_model, cfg.tokenizer.path or tokenizer_path, str(traces), policy, sft_cfg,
                    on_step=lambda done, total, loss: bar.update(done, f"loss {loss:.3f}", total))
            bar.finish()
            outputs.update(traces=f"{stage}/traces.jsonl", policy=f"{stage}/policy")
            marker["traced_task_ids"] = traced_ids
        elif stage == "rl":
            pool = rl_task_ids(train_ids, traced_ids, cfg.pipeline.rl_on_unseen_tasks)
            console.say(f"pipeline: RL on {len(pool)} training tasks"
                        + (" that SFT never saw" if cfg.pipeline.rl_on_unseen_tasks and traced_ids else ""))
            if plan.action == "run":  # before its first checkpoint: which config the checkpoints are of
                write_json(stage_dir / STARTED, marker)
            run_path = train(_stage_cfg(cfg, stage, policy, pool, resume=plan.action == "resume"))
            policy = str(run_path / "policy")
            outputs.update(policy=str(Path(policy).relative_to(root)))
        reports[stage] = evaluate(_stage_cfg(cfg, stage, policy if stage != "base" else cfg.model.path))
        loggers.log_eval(stage, index, reports[stage])
        console.say(f"pipeline: {stage} pass@1 = {reports[stage]['pass@1']}")
        outputs.update(eval=f"{stage}/eval.json", predictions=f"{stage}/predictions.jsonl")
        # Last, and atomically: a stage without this file is not done, whatever else its directory holds.
        write_json(stage_dir / MARKER, {**marker, "outputs": outputs, "pass@1": reports[stage]["pass@1"],
                                        "wall_s": round(time.monotonic() - started, 2),
                                        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    return _summarize(cfg, root, reports)


def _summarize(cfg: Config, root: Path, reports: dict[str, dict]) -> dict:
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
    summary = {
        **{f"{stage}_pass_at_1": report["pass@1"] for stage, report in reports.items()},
        **deltas,
        "pass_at_1_ci95": {stage: [i["ci95_low"], i["ci95_high"]] if i else None for stage, i in intervals.items()},
        "pass_at_k": {stage: report["pass@k"] for stage, report in reports.items()},
        "attempts_per_task": cfg.eval.attempts,
        "eval_tasks": reports[last]["num_tasks"],
        "eval_temperature": cfg.eval.temperature,
        "stages": stages,
    }
    write_json(root / "summary.json", summary)
    _plot(reports, intervals, deltas, root / "learning_curve.png")
    console.say(summary_table(summary))
    return summary


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
        lines.append(f"{stage:5} | {_pct(summary[f'{stage}_pass_at_1'])} {shown} "
                     f"| {_pct(summary['pass_at_k'][stage][str(k)])}")
    for before, after in zip(summary["stages"], summary["stages"][1:]):
        d = summary[f"{after}_minus_{before}"]
        if d is None:
            lines.append(f"{after} - {before}: no task scored in both stages, no delta")
            continue
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
    errors = [[v - intervals[s]["ci95_low"] if intervals[s] else 0.0 for s, v in zip(stages, values)],
              [intervals[s]["ci95_high"] - v if intervals[s] else 0.0 for s, v in zip(stages, values)]]
    ax.errorbar(stages, values, yerr=errors, marker="o", capsize=4, label="pass@1 (95% CI)")
    k = max(int(key) for key in reports[stages[0]]["pass@k"])
    ax.plot(stages, [reports[s]["pass@k"][str(k)] for s in stages], marker="s", linestyle="--",
            label=f"pass@{k}")
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
