"""`swerve pipeline`: the reference run's story in miniature, one stage after another.

    base eval  ->  SFT on expert traces  ->  eval  ->  async GRPO from the SFT policy  ->  eval

Each stage writes under runs/<run.name>/<stage>/; the run directory gets summary.json, the
RL stage's predictions.jsonl and learning_curve.png (actors/report/stage_summary.py).

Read `run_pipeline`, then one function per stage (`_base`, `_sft`, `_rl`): each does its work and
names the config its policy is evaluated with; `_run_stage` evaluates it and marks it done.
Re-running continues: finished stages are skipped, a killed RL stage resumes from its checkpoint
(actors/stages/stage_cache.py says when); `pipeline.fresh=true` runs every stage again.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path
from typing import Callable, Sequence

from actors.report import console
from actors.report.loggers import RunLoggers
from actors.report.stage_summary import summarize
from actors.report.view.page import write_page
from actors.stages.stage_cache import (FRESH_HINT, MARKER, STAGES, StagePlan, load_report, plan_stages, stage_record,
                                       write_marker, write_started)
from configs import Config
from envs.tasks.stream import STREAM_SPLIT


@dataclasses.dataclass
class _Story:
    """What the stages share, and what each hands the next: the policy to start from and the
    training tasks SFT saw a trace of (RL's pool leaves them out)."""
    cfg: Config
    root: Path
    loggers: RunLoggers
    tokenizer_path: str
    base_model: str
    train_ids: list[str]
    policy: str
    traced_ids: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Trained:
    """A stage's work before its eval: the config its policy is evaluated with, the files it made
    (relative to the run directory, listed in its marker) and what its marker keeps for a re-run."""
    eval_cfg: Config
    outputs: dict[str, str] = dataclasses.field(default_factory=dict)
    kept: dict = dataclasses.field(default_factory=dict)


def run_pipeline(cfg: Config) -> dict:
    root = cfg.run.path
    root.mkdir(parents=True, exist_ok=True)
    plans = plan_stages(root, cfg)  # before any work: a stage name that does not exist fails here
    loggers = RunLoggers(cfg, root)  # each stage's eval as a point of the learning curve
    try:
        return _run_stages(cfg, root, plans, loggers)
    finally:
        loggers.close()


def _run_stages(cfg: Config, root: Path, plans: list[StagePlan], loggers: RunLoggers) -> dict:
    from actors.stages.policy_setup import ensure_policy
    from envs.tasks.loaders import load_tasks

    tokenizer_path, base_model = ensure_policy(cfg)
    train_ids = [t.id for t in load_tasks(cfg.tasks.source, cfg.tasks.split, cfg.tasks.ids)]
    story = _Story(cfg, root, loggers, tokenizer_path, base_model, train_ids, policy=base_model)
    fingerprints = {plan.stage: plan.fingerprint for plan in plans}
    reports: dict[str, dict] = {}
    for index, plan in enumerate(plans):
        reports[plan.stage] = (_reuse_stage(story, index, plan) if plan.action == "skip" else
                               _run_stage(story, index, plan, stage_record(plan, cfg, fingerprints)))
        _write_view(root)  # what the agent did so far, readable while the next stage runs
    summary = summarize(cfg, root, reports, rl_segments(cfg)[:-1] if "rl" in reports else [])
    page = _write_view(root)
    if page is not None:
        console.say_last(f"what the agent did: {page} (opens offline; `swerve view {root} --serve` serves it on loopback)")
    return summary


def _write_view(root: Path) -> Path | None:
    """The run's page; a page that cannot be written (a record it cannot read, a full disk) is a
    warning that names the error, never the end of a pipeline whose stages are done."""
    try:
        return write_page(root, STAGES)
    except (OSError, ValueError, KeyError, TypeError) as error:
        console.warn(f"the run's page (view.html) was not written: {type(error).__name__}: {error}; "
                     f"`swerve view {root}` tries again")
        return None


def _reuse_stage(story: _Story, index: int, plan: StagePlan) -> dict:
    """A stage finished earlier with this config: its report read back, its policy (and SFT's
    traced tasks) handed on as if it had just run."""
    assert plan.marker is not None
    stage, outputs = plan.stage, plan.marker["outputs"]
    report = load_report(story.root, stage, plan.marker)
    story.policy = str(story.root / outputs["policy"]) if "policy" in outputs else story.policy
    story.traced_ids = plan.marker.get("traced_task_ids", story.traced_ids)
    story.loggers.log_eval(stage, index, report)
    console.say(f"pipeline: {stage} skipped: it finished earlier with this config "
                f"({stage}/{MARKER}), pass@1 = {report['pass@1']} read from {outputs['eval']}; {FRESH_HINT}")
    return report


def _run_stage(story: _Story, index: int, plan: StagePlan, record: dict) -> dict:
    """A stage's work, then its eval, then its marker: the last file it writes."""
    from actors.stages.evaluate import evaluate

    stage, stage_dir = plan.stage, story.root / plan.stage
    if plan.note:
        console.say(f"pipeline: {stage} {plan.note}")
    if plan.action == "run" and stage_dir.exists():
        shutil.rmtree(stage_dir)  # what a killed or outdated attempt left is never taken as done
    stage_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    trained = STAGE_WORK[stage](story, plan, record)
    report = evaluate(trained.eval_cfg)
    story.loggers.log_eval(stage, index, report)
    console.say(f"pipeline: {stage} pass@1 = {report['pass@1']}")
    outputs = {**trained.outputs, "eval": f"{stage}/eval.json", "predictions": f"{stage}/predictions.jsonl"}
    write_marker(stage_dir, {**record, **trained.kept}, outputs, report["pass@1"], time.monotonic() - started)
    return report


def _base(story: _Story, plan: StagePlan, record: dict) -> _Trained:
    """The untrained model: nothing to train; its eval is cheaper where pipeline.base_* say so."""
    return _Trained(base_eval_cfg(story.cfg))


def _sft(story: _Story, plan: StagePlan, record: dict) -> _Trained:
    """Expert traces of the first pipeline.trace_tasks training tasks, and the policy SFT makes of
    them from the base model."""
    from envs.tasks.loaders import load_tasks
    from policies.training.sft import run_sft

    cfg, stage_dir = story.cfg, story.root / plan.stage
    traces = stage_dir / "traces.jsonl"
    train_tasks = traced_tasks(load_tasks(cfg.tasks.source, cfg.tasks.split, cfg.tasks.ids), cfg)
    story.traced_ids = [t.id for t in train_tasks]
    counts = _expert_traces(story, traces, train_tasks)
    console.say(f"pipeline: {counts['resolved']} expert traces ({counts['with_recovery']} with recovery)")
    story.policy = str(stage_dir / "policy")
    sft_cfg = dataclasses.replace(cfg.sft, data=str(traces), out_dir=story.policy)
    bar = console.progress("sft train", 0, "steps")  # its size is known once the traces are read
    run_sft(story.base_model, cfg.tokenizer.path or story.tokenizer_path, str(traces), story.policy, sft_cfg,
            on_step=lambda done, total, loss: bar.update(done, f"loss {loss:.3f}", total))
    bar.finish()
    return _Trained(_stage_cfg(cfg, plan.stage, story.policy),
                    {"traces": f"{plan.stage}/traces.jsonl", "policy": f"{plan.stage}/policy"},
                    {"traced_task_ids": story.traced_ids})


def traced_tasks(tasks: Sequence, cfg: Config) -> list:
    """The first pipeline.trace_tasks of the training tasks (0: all of them); asking for more than
    there are is refused, not quietly cut."""
    wanted = cfg.pipeline.trace_tasks
    if wanted > len(tasks):
        raise ValueError(f"pipeline.trace_tasks is {wanted} but tasks.source={cfg.tasks.source!r} "
                         f"(split {cfg.tasks.split!r}) has {len(tasks)} tasks: lower pipeline.trace_tasks "
                         f"(0 traces every task)")
    return list(tasks[: wanted or len(tasks)])


def _expert_traces(story: _Story, traces: Path, tasks: list) -> dict:
    """The traces SFT learns from, written to `traces`; counts of those resolved and with recovery."""
    from actors.stages.harness_traces import write_harness_traces
    from envs.expert import write_traces
    from envs.make import takes_harness

    cfg = story.cfg
    bar = console.progress("sft traces", len(tasks), "tasks")
    progress = lambda done, resolved: bar.update(done, f"{resolved} traces resolved")  # noqa: E731
    if takes_harness(cfg.env.id):  # the harness itself makes them, in its own format
        counts = write_harness_traces(str(traces), tasks, cfg, story.tokenizer_path, on_task=progress,
                                      workers=cfg.pipeline.trace_workers or os.cpu_count() or 1)
    else:
        counts = write_traces(str(traces), tasks, cfg.pipeline, cfg.env, cfg.sandbox, cfg.run.seed, on_task=progress)
    bar.finish()
    return counts


def _rl(story: _Story, plan: StagePlan, record: dict) -> _Trained:
    """Async GRPO from the policy before it, on the training tasks SFT never saw (or the stream),
    stopping at each of pipeline.rl_eval_steps for a held-out eval along the way."""
    from actors.stages.driver import train
    from actors.stages.evaluate import evaluate

    cfg, stage, stage_dir = story.cfg, plan.stage, story.root / plan.stage
    pool = rl_task_ids(story.train_ids, story.traced_ids, cfg.pipeline.rl_tasks)
    console.say(f"pipeline: RL on {len(pool)} training tasks" + (" that SFT never saw" if story.traced_ids else "")
                if pool else f"pipeline: RL on fresh tasks of the {cfg.tasks.source} stream, each drawn once")
    if plan.action == "run":  # before its first checkpoint: which config the checkpoints are of
        write_started(stage_dir, record)
    resume = plan.action == "resume"
    *points, total = rl_segments(cfg)
    for point in points:  # held-out evals along the way; a resumed stage keeps those it has
        at = stage_dir / f"at-step-{point}"
        if not (at / "eval.json").is_file():
            run_path = train(rl_cfg(cfg, story.policy, pool, point, resume))
            evaluate(_stage_cfg(cfg, stage, str(run_path / "policy"), eval_dir=f"{stage}/at-step-{point}"))
        resume = True
    run_path = train(rl_cfg(cfg, story.policy, pool, total, resume))
    story.policy = str(run_path / "policy")
    return _Trained(_stage_cfg(cfg, stage, story.policy), {"policy": str(Path(story.policy).relative_to(story.root))})


# Each stage's work, by the name pipeline.stages uses (actors/stages/stage_cache.py STAGES).
STAGE_WORK: dict[str, Callable[[_Story, StagePlan, dict], _Trained]] = {"base": _base, "sft": _sft, "rl": _rl}


# -- each stage's config -------------------------------------------------------------------------
def _stage_cfg(cfg: Config, stage: str, model_path: str, task_ids: Sequence[str] = (),
               resume: bool = False, eval_dir: str = "") -> Config:
    base = cfg.run.path
    return dataclasses.replace(
        cfg,
        run=dataclasses.replace(cfg.run, dir=str(base), name=stage, resume=resume),
        model=dataclasses.replace(cfg.model, path=model_path),
        tokenizer=dataclasses.replace(cfg.tokenizer, path=model_path or cfg.tokenizer.path),
        tasks=dataclasses.replace(cfg.tasks, ids=list(task_ids or cfg.tasks.ids)),
        eval=dataclasses.replace(cfg.eval, out_dir=str(base / (eval_dir or stage))),
    )


def base_eval_cfg(cfg: Config) -> Config:
    """The untrained model's eval: fewer tasks, attempts and turns where pipeline.base_* say so."""
    p = cfg.pipeline
    return dataclasses.replace(
        _stage_cfg(cfg, "base", cfg.model.path),
        eval=dataclasses.replace(cfg.eval, out_dir=str(cfg.run.path / "base"),
                                 num_tasks=p.base_eval_tasks or cfg.eval.num_tasks,
                                 attempts=p.base_eval_attempts or cfg.eval.attempts,
                                 max_turns=p.base_max_turns or cfg.eval.max_turns))


def rl_cfg(cfg: Config, policy: str, pool: Sequence[str], total_steps: int, resume: bool) -> Config:
    """The RL stage's training run: on its pool of ids, or on the stream when the pool is empty."""
    staged = _stage_cfg(cfg, "rl", policy, pool, resume=resume)
    return dataclasses.replace(
        staged, trainer=dataclasses.replace(cfg.trainer, total_steps=total_steps),
        tasks=staged.tasks if pool else dataclasses.replace(cfg.tasks, split=STREAM_SPLIT, ids=[]))


def rl_task_ids(train_ids: Sequence[str], traced_ids: Sequence[str], rl_tasks: str) -> list[str]:
    """The RL stage's task pool: "unseen", the training tasks SFT had no trace of (so RL is rewarded
    for solving, not for recalling a memorised trace); "all", every training task; "stream", none
    (RL draws fresh tasks from the source's stream)."""
    if rl_tasks == "stream":
        return []
    if rl_tasks == "all":
        return list(train_ids)
    traced = set(traced_ids)
    pool = [task_id for task_id in train_ids if task_id not in traced]
    if not pool:
        raise ValueError("pipeline.rl_tasks is 'unseen' but every training task has an expert trace: "
                         "lower pipeline.trace_tasks, or set pipeline.rl_tasks=stream")
    return pool


def rl_segments(cfg: Config) -> list[int]:
    """The steps the RL stage stops at to evaluate: pipeline.rl_eval_steps, then trainer.total_steps."""
    total = cfg.trainer.total_steps
    points = sorted(set(cfg.pipeline.rl_eval_steps))
    if any(p < 1 or p >= total for p in points):
        raise ValueError(f"pipeline.rl_eval_steps {points}: each must be between 1 and trainer.total_steps - 1 "
                         f"({total - 1})")
    return [*points, total]
