"""Which of `swerve pipeline`'s stages a re-run can reuse, and the files that say so.

A stage that finished leaves `<stage>/done.json` (MARKER), written atomically and last: what it
produced and the fingerprint of the config it depends on (`stage_fingerprints`). A stage whose
marker matches is skipped and its eval.json read back; the first one whose marker is missing or
differs runs again from an empty directory, and so does every stage after it, since their inputs
may change. The RL stage records its fingerprint in `rl/started.json` (STARTED) before its first
checkpoint, so a run killed before its marker goes on from its newest checkpoint when that
checkpoint was made with this config. `pipeline.fresh=true` runs every stage again.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import time
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

from actors.report.run_dir import write_json
from actors.stages.evaluate import eval_rollout
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
# Keys only an RL run reads (its rollouts and its task stream); an eval reads the rest of rollout.*.
RL_ONLY = ("trainer.*", "pipeline.rl_*", "rollout.mode", "rollout.max_staleness", "rollout.staleness_unit",
           "rollout.group_size", "rollout.groups_per_batch", "rollout.temperature", "rollout.normalize_advantage_std",
           "rollout.drop_uniform_groups", "rollout.task_selection", "rollout.pass_rate_*", "rollout.explore_fraction",
           "tasks.stream_*", "tasks.synth.*")
UNREAD_BY_STAGE = {
    "base": (*RL_ONLY, "sft.*", "pipeline.trace*", "pipeline.expert_thoughts", "pipeline.recovery_rate"),
    "sft": (*RL_ONLY, "pipeline.base_*"),
    "rl": ("pipeline.base_*",),
}
FRESH_HINT = "pipeline.fresh=true runs every stage again"


# -- what a stage depends on -----------------------------------------------------------------
def stage_config(cfg: Config, stage: str) -> dict[str, Any]:
    """The keys whose values a stage's result depends on."""
    left_out = NOT_FINGERPRINTED + UNREAD_BY_STAGE[stage]
    config = {key: value for key, value in flat_config(cfg).items()
              if not any(fnmatch.fnmatchcase(key, pattern) for pattern in left_out)}
    if stage != "rl":
        # An eval reads rollout.max_turns only as eval.max_turns's fallback: the turns it takes
        # are what count, so shortening the training rollouts keeps base and SFT.
        del config["rollout.max_turns"]
        config["eval.max_turns"] = eval_rollout(cfg).max_turns
    return config


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
    from policies.training.checkpoint import latest_checkpoint

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


# -- the files a stage leaves for the next invocation ----------------------------------------
def stage_record(plan: StagePlan, cfg: Config, fingerprints: dict[str, str]) -> dict:
    """What a stage's marker (and the RL stage's started record) says it was made from."""
    stages = list(cfg.pipeline.stages)
    index = stages.index(plan.stage)
    return {"stage": plan.stage, "fingerprint": plan.fingerprint,
            "after": fingerprints[stages[index - 1]] if index else None,
            "config": stage_config(cfg, plan.stage)}


def write_started(stage_dir: Path, record: dict) -> None:
    """Before the RL stage's first checkpoint: which config its checkpoints are of."""
    write_json(stage_dir / STARTED, record)


def write_marker(stage_dir: Path, record: dict, outputs: dict[str, str], pass_at_1: float, wall_s: float) -> None:
    # Last, and atomically: a stage without this file is not done, whatever else its directory holds.
    write_json(stage_dir / MARKER, {**record, "outputs": outputs, "pass@1": pass_at_1, "wall_s": round(wall_s, 2),
                                    "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})


def load_report(root: Path, stage: str, marker: dict) -> dict:
    """A skipped stage's eval report, read back for the summary as if it had just run."""
    report = json.loads((root / marker["outputs"]["eval"]).read_text())
    report["out_dir"] = str(root / stage)
    return report
