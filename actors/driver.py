"""The training loop. Everything else is an actor; this file is the whole story of a step:

    batch = collector.next_batch()  ->  trainer shards train_step(batch)  ->  push weights  ->  version += 1
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import ray

from actors.launch import Fleet, init_ray, kill, launch, shutdown
from actors.run_dir import RunDir
from actors.trajectory import Batch
from configs import Config
from envs.validate import trainable_tasks
from policies.model import ensure_model
from policies.tokenizer import ensure_tokenizer

log = logging.getLogger("swerve")


def wait_for_batch(fleet: Fleet, cfg: Config) -> Batch:
    next_status = time.monotonic() + cfg.run.status_interval_s
    while True:
        batch = ray.get(fleet.collector.next_batch.remote(cfg.rollout.temperature))
        if batch is not None:
            return batch
        fleet.engine_set.maybe_replace_dead()  # a dead engine comes back with the current weights
        finished, _ = ray.wait(fleet.episode_runs, num_returns=len(fleet.episode_runs), timeout=0)
        if finished:
            ray.get(finished)  # an episode loop only ends early by crashing: surface its error
            raise RuntimeError("episode actors stopped before the run ended")
        if time.monotonic() >= next_status:
            acc = ray.get(fleet.collector.accounting.remote())
            if acc["tasks_exhausted"]:
                raise RuntimeError(f"every task is quarantined, nothing left to train on: {acc['quarantined_tasks']}")
            print(f"[swerve] waiting for batch: in_flight={acc['in_flight']} buffered={acc['buffered']} "
                  f"admitted={acc['admitted']}", flush=True)
            next_status += cfg.run.status_interval_s
        time.sleep(cfg.rollout.poll_interval_s)


def train_on_batch(fleet: Fleet, batch: Batch) -> dict:
    world = len(fleet.trainers)
    parts = [batch.samples[r::world] for r in range(world)]
    stats = ray.get([t.train_step.remote(p, batch.temperature, batch.num_loss_tokens)
                     for t, p in zip(fleet.trainers, parts)])
    return {
        "time_actor_update_s": max(s["time_actor_update_s"] for s in stats),
        "time_logprob_s": max(s["time_logprob_s"] for s in stats),
        "loss": sum(s["loss"] for s in stats),
        "grad_norm": stats[0]["grad_norm"],
        "trainer_versions": [s["version"] for s in stats],
    }


def sync_weights(fleet: Fleet, version: int) -> list[int]:
    weights = ray.put(ray.get(fleet.trainers[0].state_dict.remote()))
    return fleet.engine_set.sync(weights, version)


def train(cfg: Config) -> Path:
    run_dir = RunDir(cfg)
    init_ray(cfg)
    tokenizer_path = ensure_tokenizer(cfg.tokenizer)
    model_path = ensure_model(cfg.model, tokenizer_path)
    tasks, quarantined = trainable_tasks(cfg.tasks)
    fleet = launch(cfg, tokenizer_path, model_path, tasks)
    print(f"[swerve] run {cfg.run.name}: {len(tasks)} tasks ({len(quarantined)} quarantined, skipped), "
          f"{len(fleet.engines)} engines, "
          f"{len(fleet.trainers)} trainer shards, {len(fleet.episodes)} episode actors -> {run_dir.path}", flush=True)
    version = 0
    try:
        for step in range(1, cfg.trainer.total_steps + 1):
            t_step = time.perf_counter()
            batch = wait_for_batch(fleet, cfg)
            time_rollout_wait_s = time.perf_counter() - t_step
            update = train_on_batch(fleet, batch)
            version += 1
            t_sync = time.perf_counter()
            engine_versions = sync_weights(fleet, version)
            time_weight_sync_s = time.perf_counter() - t_sync
            ray.get(fleet.collector.set_version.remote(version))
            accounting = ray.get(fleet.collector.accounting.remote())  # raises if the identity breaks
            engine_stats = fleet.engine_set.stats(reset_peak=True)
            metrics = {
                "step": step, "policy_version": version, "step_time_s": time.perf_counter() - t_step,
                "time_rollout_wait_s": time_rollout_wait_s, "time_weight_sync_s": time_weight_sync_s,
                **update, **batch.stats, "engine_versions": engine_versions,
                "engine_kv_usage_max": max(s["kv_usage_peak"] for s in engine_stats),
                "engine_tokens_per_s": sum(s["tokens_per_s"] for s in engine_stats),
                "engine_weight_update_s": max(s["weight_update_s"] for s in engine_stats),
                "engine_restarts": fleet.engine_set.restarts,
                **{k: accounting[k] for k in ("admitted", "in_flight", "buffered", "trained", "dropped_stale",
                                               "infra_excluded", "quarantined")},
            }
            run_dir.write_metrics(metrics)
            run_dir.write_accounting({**accounting, "tasks_skipped_quarantined": quarantined})
            run_dir.write_trajectories(step, [t.summary() for t in batch.trajectories[: cfg.run.trajectories_per_step]])
            print(f"[swerve] step {step}/{cfg.trainer.total_steps} v{version} "
                  f"reward={metrics['reward_mean']:.3f} staleness_max={metrics['staleness_max']} "
                  f"rollout_wait={time_rollout_wait_s:.1f}s update={update['time_actor_update_s']:.1f}s "
                  f"sync={time_weight_sync_s:.2f}s admitted={accounting['admitted']} "
                  f"trained={accounting['trained']}", flush=True)
        results = shutdown(fleet, grace_s=cfg.rollout.max_episode_seconds)
        accounting = ray.get(fleet.collector.accounting.remote())
        accounting["episode_actors"] = results
        accounting["tasks_skipped_quarantined"] = quarantined
        run_dir.write_accounting(accounting)
    finally:
        kill(fleet)
    return run_dir.path
