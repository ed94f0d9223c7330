"""`swerve bench async_vs_sync`: the real driver, collector, episode actors and local sandboxes
around a simulated engine (engine.backend=sim) and trainer (trainer.backend=sim), sync against
async at several staleness bounds, next to the ideal bound each workload allows. The async runs
are straggler-first (engine.priority=age); at the headline bound each workload also runs fifo
(the default), and with the bound counted per token (rollout.staleness_unit=token: no batch waits
for a straggler, its stale tokens are masked instead), side by side.

The ideal bound is what a perfect pipeline reaches: the lesser of engine capacity (max batch
over the time of a full decode step) divided by the workload's mean generated tokens per
trajectory, and trainer capacity (batch size over the step time). The trainer's step time is
calibrated to the ideal rollout time of one batch, as in the reference run (63% update / 29%
rollout wait), so both capacities are equal and the bound is met only when neither side waits.
"""
from __future__ import annotations

import json
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

from policies.engines.sim_engine import workload_means
from configs import Config
from configs.schema import FaultsConfig

# Reference run: 84% of trajectories hit the turn cap, successful ones submit at a median of 8
# turns, attempts at one task differ up to 2.5x in length. heavy_tail: reply lengths from a
# Pareto tail (most short, a few 12x longer).
WORKLOADS = {
    "reference": {"cap_fraction": 0.84, "submit_turn_min": 6, "submit_turn_max": 10,
                  "tokens_distribution": "uniform", "tokens_per_turn_min": 24, "tokens_per_turn_max": 60},
    "heavy_tail": {"cap_fraction": 0.84, "submit_turn_min": 2, "submit_turn_max": 10,
                   "tokens_distribution": "pareto", "tokens_per_turn_min": 24, "tokens_pareto_shape": 1.3,
                   "tokens_per_turn_max": 200},
}
MAX_TURNS = 10
UNCAPPED_TURNS = 30  # the length-cap comparison: the same workload with 3x the turn cap
STALENESS = (1, 2, 4)
HEADLINE_STALENESS = 2
# One engine whose full batch is one training batch. Sizes are small because every run starts
# its own fleet, two Ray worker processes per episode actor, at ~0.7 s of CPU each on 2 cores.
MAX_BATCH = 8
STEP_BASE_S, STEP_PER_REQUEST_S = 0.003, 0.0005
EXTRA_EPISODE_ACTORS = 6  # async keeps the engine's batch full while some episodes are in sandboxes
GROUPS, GROUP_SIZE = 2, 4
WARMUP_STEPS = {"sync": 1, "async": 1}
# Steps per measurement window; each run holds `repetitions` windows.
WINDOW_STEPS = {"sync": 1, "async": 2}


def bench_config(cfg: Config, workload: str, mode: str, staleness: int, max_turns: int, run_dir: str,
                 name: str, windows: int, priority: str = "age", unit: str = "trajectory") -> Config:
    engine = replace(bench_engine(cfg, workload), priority=priority)
    sim = engine.sim
    bound = ideal_bound(engine, GROUPS * GROUP_SIZE, MAX_TURNS)  # the calibration uses the capped workload
    return replace(
        cfg,
        run=replace(cfg.run, name=name, dir=run_dir, resume=False, status_interval_s=60.0, trajectories_per_step=0),
        engine=engine,
        trainer=replace(cfg.trainer, backend="sim", num_shards=1, sim_step_s=bound["ideal_rollout_s_per_batch"],
                        total_steps=WARMUP_STEPS[mode] + windows * WINDOW_STEPS[mode], checkpoint_interval=0, kl_coef=0.0),
        rollout=replace(cfg.rollout, mode=mode, max_staleness=staleness, staleness_unit=unit, group_size=GROUP_SIZE,
                        groups_per_batch=GROUPS, num_episode_actors=MAX_BATCH + EXTRA_EPISODE_ACTORS,
                        max_turns=max_turns, max_tokens_per_turn=sim.tokens_per_turn_max, max_total_tokens=65536,
                        drop_uniform_groups=False, poll_interval_s=0.02, shutdown_grace_s=0.0),
        faults=FaultsConfig(),  # none injected
    )


def bench_engine(cfg: Config, workload: str):
    """The engine section every run of `workload` uses: one sim engine at the bench's batch and speed."""
    sim = replace(cfg.engine.sim, step_base_s=STEP_BASE_S, step_per_request_s=STEP_PER_REQUEST_S, **WORKLOADS[workload])
    return replace(cfg.engine, backend="sim", num_engines=1, max_batch_size=MAX_BATCH, max_context_tokens=65536,
                   sim=sim)


def capacity_tokens_per_s(engine) -> float:
    """The engines' tokens/s with every one at its full batch."""
    full_step_s = engine.sim.step_base_s + engine.sim.step_per_request_s * engine.max_batch_size
    return engine.num_engines * engine.max_batch_size / full_step_s


def ideal_bound(engine, batch_size: int, max_turns: int) -> dict:
    """Throughput a perfect pipeline reaches on this workload, from its own parameters."""
    capacity = capacity_tokens_per_s(engine)
    means = workload_means(engine.sim, max_turns)
    engine_traj_per_s = capacity / means["tokens"]
    return {"engine_tokens_per_s": capacity, "mean_tokens_per_traj": means["tokens"],
            "mean_turns_per_traj": means["turns"], "capped_fraction": means["capped_fraction"],
            "engine_traj_per_h": engine_traj_per_s * 3600, "ideal_rollout_s_per_batch": batch_size / engine_traj_per_s}


def measure(cfg: Config) -> dict:
    """One training run with the real driver. Figures are over all steps after warm-up: a window
    of a few steps reads batch-quantized, buffer-fed rates, so the windows (WINDOW_STEPS each)
    are listed only to show the spread."""
    from actors.stages.driver import train

    path = train(cfg)
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    warm, size = WARMUP_STEPS[cfg.rollout.mode], WINDOW_STEPS[cfg.rollout.mode]
    capacity = capacity_tokens_per_s(cfg.engine)
    windows = [_window(rows[i - 1], rows[i:i + size], capacity) for i in range(warm, len(rows) - size + 1, size)]
    return {**_window(rows[warm - 1], rows[warm:], capacity), "dropped_stale": rows[-1]["dropped_stale"],
            "admitted": rows[-1]["admitted"], "windows": windows}


def _window(before: dict, rows: list[dict], capacity_tokens_per_s: float) -> dict:
    wall_s = sum(r["step_time_s"] for r in rows)
    tokens = sum(r["engine_tokens_per_s"] * r["step_time_s"] for r in rows)
    tails = [r["tail_fraction"] for r in rows if r["tail_fraction"] is not None]
    return {
        "traj_per_h": (rows[-1]["trained"] - before["trained"]) * 3600 / wall_s,
        "step_time_s": wall_s / len(rows),
        "trainer_idle_fraction": 1 - sum(r["time_actor_update_s"] for r in rows) / wall_s,
        "engine_busy_fraction": sum(r["engine_busy_fraction"] * r["step_time_s"] for r in rows) / wall_s,
        # Busy counts a step with one request like a full one; utilization is tokens over capacity.
        "engine_utilization": tokens / wall_s / capacity_tokens_per_s,
        "tail_fraction": statistics.fmean(tails) if tails else None,
        "staleness_mean": statistics.fmean(r["staleness_mean"] for r in rows),
        "turns_mean": statistics.fmean(r["turns_mean"] for r in rows),
        "tokens_mean": statistics.fmean(r["tokens_mean"] for r in rows),
        "stale_token_fraction": statistics.fmean(r["stale_token_fraction"] or 0.0 for r in rows),
        "behavior_kl": _mean_known(r.get("behavior_kl") for r in rows),
    }


def _mean_known(values) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def async_vs_sync(cfg: Config, repetitions: int) -> dict:
    from actors.fleet.launch import init_ray

    work = Path(tempfile.mkdtemp(prefix="swerve-bench-async-"))
    init_ray(cfg)
    workloads: dict = {}
    for workload in WORKLOADS:
        modes = {"sync": measure(bench_config(cfg, workload, "sync", 0, MAX_TURNS, str(work), f"{workload}-sync",
                                              repetitions))}
        for k in STALENESS:
            modes[f"async{k}"] = measure(bench_config(cfg, workload, "async", k, MAX_TURNS, str(work),
                                                      f"{workload}-async{k}", repetitions))
        # Straggler-first against arrival order, at the headline bound (engine.priority).
        modes[f"async{HEADLINE_STALENESS}-fifo"] = measure(bench_config(
            cfg, workload, "async", HEADLINE_STALENESS, MAX_TURNS, str(work), f"{workload}-async{HEADLINE_STALENESS}-fifo",
            repetitions, priority="fifo"))
        # The bound counted per token: nothing waits for a straggler, its stale tokens are masked.
        modes[f"async{HEADLINE_STALENESS}-token"] = measure(bench_config(
            cfg, workload, "async", HEADLINE_STALENESS, MAX_TURNS, str(work), f"{workload}-async{HEADLINE_STALENESS}-token",
            repetitions, unit="token"))
        bound = ideal_bound(bench_engine(cfg, workload), GROUPS * GROUP_SIZE, MAX_TURNS)
        for m in modes.values():
            m["fraction_of_ideal"] = m["traj_per_h"] / bound["engine_traj_per_h"]
            m["ratio_over_sync"] = m["traj_per_h"] / modes["sync"]["traj_per_h"]
        workloads[workload] = {"ideal": bound, "ideal_ratio_over_sync": bound["engine_traj_per_h"] / modes["sync"]["traj_per_h"],
                               "modes": modes}
    # The length cap's effect: sync steps on the reference workload at 3x the turn cap.
    uncapped = measure(bench_config(cfg, "reference", "sync", 0, UNCAPPED_TURNS, str(work), "reference-uncapped", 1))
    ref, head = workloads["reference"], f"async{HEADLINE_STALENESS}"
    ratio = ref["modes"][head]["traj_per_h"] / ref["modes"]["sync"]["traj_per_h"]
    efficiency = {name: w["modes"][head]["fraction_of_ideal"] for name, w in workloads.items()}
    idle = ref["modes"][head]["trainer_idle_fraction"]
    priority = {name: {p: {"fraction_of_ideal": w["modes"][m]["fraction_of_ideal"],
                           "trainer_idle_fraction": w["modes"][m]["trainer_idle_fraction"]}
                       for p, m in (("age", head), ("fifo", f"{head}-fifo"))} for name, w in workloads.items()}
    idle_max = max(w["modes"][head]["trainer_idle_fraction"] for w in workloads.values())
    # rollout.staleness_unit side by side at the headline bound (both straggler-first).
    unit = {name: {u: {k: w["modes"][m][k] for k in ("fraction_of_ideal", "trainer_idle_fraction",
                                                     "stale_token_fraction", "dropped_stale", "admitted")}
                   for u, m in (("trajectory", head), ("token", f"{head}-token"))} for name, w in workloads.items()}
    return {
        "figure": f"reference workload: async (staleness {HEADLINE_STALENESS}) / sync trajectories per hour",
        "ratio": ratio, "baseline": ref["modes"]["sync"]["traj_per_h"], "bound": ref["ideal_ratio_over_sync"],
        "target": ">= 2x sync; >= 90% of the ideal bound on both workloads; trainer idle < 10%",
        "met": ratio >= 2.0 and min(efficiency.values()) >= 0.9 and idle_max < 0.1,
        "ratio_async_over_sync": ratio,
        "ideal_ratio_over_sync": ref["ideal_ratio_over_sync"],
        "efficiency_async_over_ideal": efficiency["reference"],
        "trainer_idle_fraction_async": idle,
        "trainer_idle_fraction_sync": ref["modes"]["sync"]["trainer_idle_fraction"],
        "efficiency_by_workload": efficiency,
        "trainer_idle_fraction_by_workload": {name: w["modes"][head]["trainer_idle_fraction"]
                                              for name, w in workloads.items()},
        # engine.priority side by side at the headline staleness: age (straggler-first) vs fifo.
        "priority": priority,
        **{f"efficiency_heavy_tail_{p}": priority["heavy_tail"][p]["fraction_of_ideal"] for p in ("age", "fifo")},
        "staleness_unit": unit,
        **{f"{figure}_{name}_token": unit[name]["token"][key] for name in unit
           for figure, key in (("efficiency", "fraction_of_ideal"), ("trainer_idle_fraction", "trainer_idle_fraction"))},
        "length_cap": {"turn_cap": MAX_TURNS, "uncapped_turn_cap": UNCAPPED_TURNS,
                       "sync_step_s_capped": ref["modes"]["sync"]["step_time_s"],
                       "sync_step_s_uncapped": uncapped["step_time_s"],
                       "step_speedup_from_cap": uncapped["step_time_s"] / ref["modes"]["sync"]["step_time_s"]},
        "workloads": workloads,
        "setup": {"max_turns": MAX_TURNS, "engine": f"sim, 1 engine, max batch {MAX_BATCH}, decode step "
                                                    f"{STEP_BASE_S} s + {STEP_PER_REQUEST_S} s per request",
                  "episode_actors": MAX_BATCH + EXTRA_EPISODE_ACTORS, "batch": f"{GROUPS} groups x {GROUP_SIZE}",
                  "trainer": "sim, step time = ideal rollout time of one batch",
                  "warmup_steps": WARMUP_STEPS, "window_steps": WINDOW_STEPS,
                  "repetitions": "measurement windows within one run per configuration, figures over all of "
                                 "them: a fresh fleet per run costs ~15 s of Ray worker starts on 2 cores",
                  "sandbox": cfg.sandbox.backend, "tasks": f"{cfg.tasks.source}/{cfg.tasks.split}"},
    }
