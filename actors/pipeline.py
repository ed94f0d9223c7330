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
import os
import shutil
import time
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

from actors.report import console
from actors.report.loggers import RunLoggers
from actors.report.run_dir import write_json
from actors.report.stage_summary import summarize
from configs import Config, flat_config
from envs.stream import STREAM_SPLIT

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
# Keys only an RL run reads (its rollouts and its task stream); an eval reads the rest of rollout.*.
RL_ONLY = ("trainer.*", "pipeline.rl_*", "rollout.mode", "rollout.max_staleness", "rollout.group_size",
           "rollout.groups_per_batch", "rollout.temperature", "rollout.normalize_advantage_std",
           "rollout.drop_uniform_groups", "rollout.task_selection", "rollout.pass_rate_*", "rollout.explore_fraction",
           "tasks.stream_*", "tasks.synth.*")
UNREAD_BY_STAGE = {
    "base": (*RL_ONLY, "sft.*", "pipeline.trace*", "pipeline.expert_thoughts", "pipeline.recovery_rate"),
    "sft": (*RL_ONLY, "pipeline.base_*"),
    "rl": ("pipeline.base_*",),
}
FRESH_HINT = "pipeline.fresh=true runs every stage again"


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
                                 attempts=p.base_eval_attempts or cfg.eval.attempts),
        rollout=dataclasses.replace(cfg.rollout, max_turns=p.base_max_turns or cfg.rollout.max_turns))


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
    from actors.harness_traces import write_harness_traces
    from envs.expert import write_traces
    from envs.make import takes_harness
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
            progress = lambda done, resolved: bar.update(done, f"{resolved} traces resolved")  # noqa: E731
            if takes_harness(cfg.env.id):  # the harness itself makes them, in its own format
                counts = write_harness_traces(str(traces), train_tasks, cfg, tokenizer_path, on_task=progress,
                                              workers=cfg.pipeline.trace_workers or os.cpu_count() or 1)
                counts["with_recovery"] = 0
            else:
                counts = write_traces(str(traces), train_tasks, cfg.pipeline, cfg.env, cfg.sandbox, cfg.run.seed,
                                      on_task=progress)
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
            pool = rl_task_ids(train_ids, traced_ids, cfg.pipeline.rl_tasks)
            console.say(f"pipeline: RL on {len(pool)} training tasks" + (" that SFT never saw" if traced_ids else "")
                        if pool else f"pipeline: RL on fresh tasks of the {cfg.tasks.source} stream, each drawn once")
            if plan.action == "run":  # before its first checkpoint: which config the checkpoints are of
                write_json(stage_dir / STARTED, marker)
            resume = plan.action == "resume"
            *points, total = rl_segments(cfg)
            for point in points:  # held-out evals along the way; a resumed stage keeps those it has
                at = stage_dir / f"at-step-{point}"
                if not (at / "eval.json").is_file():
                    run_path = train(rl_cfg(cfg, policy, pool, point, resume))
                    evaluate(_stage_cfg(cfg, stage, str(run_path / "policy"), eval_dir=f"{stage}/at-step-{point}"))
                resume = True
            run_path = train(rl_cfg(cfg, policy, pool, total, resume))
            policy = str(run_path / "policy")
            outputs.update(policy=str(Path(policy).relative_to(root)))
        stage_cfg = base_eval_cfg(cfg) if stage == "base" else _stage_cfg(cfg, stage, policy)
        reports[stage] = evaluate(stage_cfg)
        loggers.log_eval(stage, index, reports[stage])
        console.say(f"pipeline: {stage} pass@1 = {reports[stage]['pass@1']}")
        outputs.update(eval=f"{stage}/eval.json", predictions=f"{stage}/predictions.jsonl")
        # Last, and atomically: a stage without this file is not done, whatever else its directory holds.
        write_json(stage_dir / MARKER, {**marker, "outputs": outputs, "pass@1": reports[stage]["pass@1"],
                                        "wall_s": round(time.monotonic() - started, 2),
                                        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    return summarize(cfg, root, reports, rl_segments(cfg)[:-1] if "rl" in reports else [])
