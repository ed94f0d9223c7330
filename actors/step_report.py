"""One step's metrics row (the DESIGN.md names) and the one-line status the driver prints."""
from __future__ import annotations

from actors.engine_set import EngineSet
from actors.sample_collector import COUNTERS as ACCOUNTING
from actors.trajectory import Batch


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


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def status_line(m: dict, total_steps: int) -> str:
    return (f"[swerve] step {m['step']}/{total_steps} v{m['policy_version']} "
            f"reward={_fmt(m['reward_mean'], '.3f')} resolved={_fmt(m['resolved_rate'], '.2f')} "
            f"staleness_max={m['staleness_max']} rollout_wait={m['time_rollout_wait_s']:.1f}s "
            f"update={m['time_actor_update_s']:.1f}s sync={m['time_weight_sync_s']:.2f}s "
            f"traj/h={_fmt(m['rollout_traj_per_hour'], '.0f')} admitted={m['admitted']} trained={m['trained']} "
            f"infra={m['infra_excluded']}")
