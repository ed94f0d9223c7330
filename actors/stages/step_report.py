"""One step's metrics row (the names of docs/contracts.md, "Metrics") and the one-line status the driver prints."""
from __future__ import annotations

from typing import Optional

from actors.fleet.engine_set import EngineSet
from actors.training.sample_collector import COUNTERS as ACCOUNTING
from actors.episodes.trajectory import Batch
from configs.schema import RolloutConfig


def step_metrics(step: int, version: int, step_time_s: float, batch: Batch, update: dict, accounting: dict,
                 engine_set: EngineSet, **timings) -> dict:
    engine_stats = engine_set.stats(reset_peak=True)
    return {
        "step": step, "policy_version": version, "step_time_s": step_time_s, **timings, **update, **batch.stats,
        "engine_kv_usage_max": max(s["kv_usage_peak"] for s in engine_stats),
        "engine_tokens_per_s": sum(s["tokens_per_s"] for s in engine_stats),
        # Share of the step's wall time the engines had work (mean over engines; dead ones count 0).
        "engine_busy_fraction": sum(s["busy_fraction"] for s in engine_stats) / len(engine_stats),
        "engine_weight_update_s": max(s["weight_update_s"] for s in engine_stats),
        "engine_restarts": engine_set.restarts,
        **{k: accounting[k] for k in ACCOUNTING},
        "readmitted_after_restart": accounting["readmitted_after_restart"],
    }


def update_metrics(layout: list[tuple[int, int]], stats: list[dict]) -> dict:
    """One update's trainer metrics from every shard's train_step stats. layout: each shard's
    (data-parallel rank, size); tensor-parallel peers hold the same samples, so each sum counts
    one shard per data-parallel rank."""
    first = {}
    for (rank, _), s in zip(layout, stats):
        first.setdefault(rank, s)
    shards = list(first.values())

    def total(key: str) -> float:
        return sum(s[key] for s in shards)

    def ratio(num: str, den: str):
        return total(num) / total(den) if total(den) else None

    measured = [s for s in shards if "ratio_mean" in s]
    versions = {s["version"] for s in stats}
    if len(versions) != 1:
        raise RuntimeError(f"trainer shards disagree on the policy version after an update: {sorted(versions)}")
    return {
        "version": versions.pop(),  # the trainer's count: the one owner of the policy version
        "time_actor_update_s": max(s["time_actor_update_s"] for s in stats),
        "time_logprob_s": max(s["time_logprob_s"] for s in stats),
        "loss": total("loss"),  # each shard's loss is already over the global token count
        "grad_norm": stats[0]["grad_norm"],
        "grad_norm_max": stats[0].get("grad_norm_max", stats[0]["grad_norm"]),
        "optimizer_steps": stats[0]["optimizer_steps"],
        "lr": stats[0]["lr"],
        "trainer_versions": [s["version"] for s in stats],
        "ratio_mean": sum(s["ratio_mean"] for s in measured) / len(measured) if measured else None,
        "ratio_max": max(s["ratio_max"] for s in measured) if measured else None,
        "clip_fraction": sum(s["clip_fraction"] for s in measured) / len(measured) if measured else None,
        "tis_mean": sum(s["tis_mean"] for s in measured) / len(measured) if measured else None,
        "logprob_mismatch_mean": ratio("mismatch_abs_sum", "mismatch_tokens"),
        "mismatch_kl": ratio("mismatch_kl_sum", "mismatch_tokens"),
        "behavior_kl": ratio("behavior_kl_sum", "behavior_tokens"),
    }


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def status_line(m: dict, total_steps: int) -> str:
    return (f"[swerve] step {m['step']}/{total_steps} v{m['policy_version']} "
            f"reward={_fmt(m['reward_mean'], '.3f')} resolved={_fmt(m['resolved_rate'], '.2f')} "
            f"staleness_max={m['staleness_max']} rollout_wait={m['time_rollout_wait_s']:.1f}s "
            f"update={m['time_actor_update_s']:.1f}s sync={m['time_weight_sync_s']:.2f}s "
            f"traj/h={_fmt(m['rollout_traj_per_hour'], '.0f')} admitted={m['admitted']} trained={m['trained']} "
            f"infra={m['infra_excluded']}")


def progress_figure(m: dict) -> str:
    """What the training stage's progress line shows after each step (actors/report/console.py)."""
    return (f"reward {_fmt(m['reward_mean'], '.2f')}, train pass rate {_fmt(m['resolved_rate'], '.2f')}, "
            f"staleness {_fmt(m['staleness_mean'], '.1f')} (max {_fmt(m['staleness_max'], 'd')})")


# Groups dropped by dynamic sampling before the first batch after which the run says it is stuck.
UNIFORM_GROUPS_BEFORE_HINT = 4


def uniform_groups_hint(acc: dict, rollout: RolloutConfig) -> Optional[str]:
    """Why no batch forms, when dynamic sampling drops every group: a policy that solves no task
    (or every task) gives each group one reward, and such groups are never trained."""
    dropped_groups = acc["filtered_uniform"] // rollout.group_size
    if not rollout.drop_uniform_groups or acc["trained"] or \
            dropped_groups < UNIFORM_GROUPS_BEFORE_HINT * rollout.groups_per_batch:
        return None
    return (f"every one of the {dropped_groups} groups finished so far gave all its members the same reward, "
            "and rollout.drop_uniform_groups=true drops such groups, so no batch can form. Start from a policy "
            "that solves some of these tasks (model.path=DIR, e.g. runs/NAME/sft/policy from `swerve pipeline`), "
            "or set rollout.drop_uniform_groups=false.")
