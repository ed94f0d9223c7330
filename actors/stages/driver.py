"""The training loop. Everything else is an actor; this file is the whole story of a step:

    batch = collector.next_batch()  ->  update = trainers.train(batch)  ->  engines.sync(weights)
    ->  collector.set_version(update's version)

Reading order of the algorithm: actors/episodes/episode_actor.py (an episode: the policy acts in a
Gymnasium env, the trajectory keeps its tokens and their versions), actors/training/sample_collector.py
(groups, staleness-bounded admission, the books), policies/training/advantages.py (group advantages),
policies/training/trainer.py (the loss and the update), then this loop. The trainer owns the policy
version (it counts updates and checkpoints the count); the driver reads it from each update and
tells the engines and the collector. Every call to another role goes through that role's handle
(actors/cluster/roles.py), which owns its deadline (deadlines.*) and names the role when it fails; when the
collector or a trainer shard dies or hangs, the supervisor (actors/fleet/supervisor.py) rebuilds the
fleet and the run goes on from its newest checkpoint.
"""
from __future__ import annotations

import time
from pathlib import Path

from actors.report.fault_report import fault_report
from actors.episodes.faults import EngineKills
from actors.fleet.launch import Fleet, init_ray, kill, launch, reap_episodes, shutdown, start_episodes
from actors.stages.policy_setup import ensure_policy
from actors.report.metrics_export import MetricsExporter
from actors.report.plots import write_plots
from actors.stages.restart import CheckpointCadence, resume_run, save_run_checkpoint
from actors.cluster.roles import RoleFailure
from actors.fleet.supervisor import Supervisor
from actors.report.run_dir import RunDir
from actors.report import console
from actors.stages.step_report import progress_figure, status_line, step_metrics, uniform_groups_hint, update_metrics
from actors.episodes.trajectory import Batch
from actors.fleet.watchdog import Watchdog, failure_dump, stall_dump
from configs import Config
from policies.training.checkpoint import latest_checkpoint
from envs.validate import trainable_tasks
from policies.seeds import derive_seed
from policies.training.trainer import minibatch_totals


def wait_for_batch(fleet: Fleet, cfg: Config, exporter: MetricsExporter, watchdog: Watchdog) -> Batch:
    next_status = time.monotonic() + cfg.run.status_interval_s
    hinted = False
    while True:
        batch = fleet.collector.next_batch(cfg.rollout.temperature)
        if batch is not None:
            return batch
        fleet.engine_set.maybe_replace_dead()  # a dead or hung engine comes back with the current weights
        if reap_episodes(fleet, cfg):  # dead episode actors are replaced; one that returned is a bug
            raise RuntimeError("episode actors stopped before the run ended")
        if time.monotonic() >= next_status:
            acc = fleet.collector.accounting()
            if acc["tasks_exhausted"]:
                raise RuntimeError(f"nothing left to train on: {acc['tasks_exhausted']}")
            exporter.export(acc)  # live counters while the trainer waits
            stalled_s = watchdog.stalled_s(acc, time.monotonic())
            if stalled_s is not None:
                print(stall_dump(acc, fleet.engine_set.stats(), len(fleet.episodes), stalled_s), flush=True)
                raise RoleFailure("run", f"stalled: nothing finished for {stalled_s:.0f} s (deadlines.progress_s)")
            hint = None if hinted else uniform_groups_hint(acc, cfg.rollout)
            if hint:
                console.warn(hint)
                hinted = True
            print(f"[swerve] waiting for batch: in_flight={acc['in_flight']} buffered={acc['buffered']} "
                  f"admitted={acc['admitted']}", flush=True)
            next_status += cfg.run.status_interval_s
        time.sleep(cfg.rollout.poll_interval_s)


def train_on_batch(fleet: Fleet, batch: Batch, cfg: Config) -> dict:
    layout = fleet.trainers.layout
    tokens, rows = minibatch_totals(batch.samples, layout[0][1], cfg.trainer.minibatches)
    return update_metrics(layout, fleet.trainers.train(batch.samples, batch.temperature, tokens, rows))


def sync_weights(fleet: Fleet, version: int) -> tuple[list[int], float]:
    weights, meta = fleet.trainers.export_weights()
    return fleet.engine_set.sync(weights, version), meta["time_export_s"]


def begin(fleet: Fleet, cfg: Config, run_dir: RunDir, resume: bool) -> tuple[int, int]:
    """(step, version) the run continues from: the newest checkpoint's when resuming, else 0."""
    if not resume:
        run_dir.keep_rows_through(0)  # a restart without a checkpoint starts over
        run_dir.record_event("start", step=0, version=0)
        return 0, 0
    step, version, readmitted = resume_run(fleet, run_dir.checkpoints)
    run_dir.keep_rows_through(step)
    sync_weights(fleet, version)
    run_dir.record_event("resume", step=step, version=version, readmitted=readmitted)
    console.say(f"resumed at step {step}, v{version}; {readmitted} in-flight trajectories re-admitted")
    return step, version


def resume_command(cfg: Config) -> str:
    return f"swerve train run.name={cfg.run.name} run.dir={cfg.run.dir} --resume (plus this run's config and overrides)"


def train(cfg: Config) -> Path:
    with RunDir(cfg) as run_dir:  # its loggers (TensorBoard, W&B) end with the run, however it ends
        return run(cfg, run_dir)


def run(cfg: Config, run_dir: RunDir) -> Path:
    init_ray(cfg)
    tokenizer_path, model_path = ensure_policy(cfg)
    tasks, quarantined = trainable_tasks(cfg.tasks)
    exporter = MetricsExporter(cfg.run.name)
    engine_kills = EngineKills(cfg.faults.engine_kill_rate, derive_seed(cfg.run.seed))  # episodes': (seed, generation, i)
    supervisor = Supervisor(cfg.run, resume_command(cfg))
    resume = cfg.run.resume
    bar = None
    while True:
        fleet = launch(cfg, model_path, tasks)
        try:
            step, version = begin(fleet, cfg, run_dir, resume)
            start_episodes(fleet, cfg, tokenizer_path)
            cadence = CheckpointCadence(cfg.trainer, start_s=time.perf_counter())  # a resume counts from here
            drawn = f"{len(tasks)} tasks ({len(quarantined)} quarantined, skipped)" if isinstance(tasks, list) \
                else f"fresh tasks from the {tasks.source} stream"
            console.say(f"run {cfg.run.name}: {drawn}, "
                        f"{len(fleet.engines)} engines, {len(fleet.trainers)} trainer shards, "
                        f"{len(fleet.episodes)} episode actors -> {run_dir.path}")
            bar = bar or console.progress(f"{cfg.run.name} train", cfg.trainer.total_steps, "steps", done=step)
            watchdog = Watchdog(cfg.deadlines.progress_s, time.monotonic())
            plot_gap_s = cfg.run.plot_every_s or float("inf")  # 0: only after the last step
            next_plot_s = time.monotonic() + plot_gap_s
            while step < cfg.trainer.total_steps:
                step += 1
                t_step = time.perf_counter()
                engine_kills.maybe_kill(fleet.engine_set)  # rollouts are generating now: a kill lands mid-generation
                batch = wait_for_batch(fleet, cfg, exporter, watchdog)
                time_rollout_wait_s = time.perf_counter() - t_step
                update = train_on_batch(fleet, batch, cfg)
                version = update["version"]
                t_sync = time.perf_counter()
                engine_versions, time_export_s = sync_weights(fleet, version)
                time_weight_sync_s = time.perf_counter() - t_sync
                fleet.collector.set_version(version)
                accounting = fleet.collector.accounting()  # raises if the identity breaks
                restarts = supervisor.restarts(fleet.engine_set.restarts, fleet.episode_replacements)
                metrics = step_metrics(step, version, time.perf_counter() - t_step, batch, update, accounting,
                                       fleet.engine_set, time_rollout_wait_s=time_rollout_wait_s,
                                       time_weight_sync_s=time_weight_sync_s, time_export_s=time_export_s,
                                       engine_versions=engine_versions, **cadence.metrics(time.perf_counter()),
                                       **{f"restarts_{kind}": n for kind, n in restarts.items()})
                run_dir.write_metrics(metrics)
                exporter.export(metrics)
                run_dir.write_accounting({**accounting, "restarts": restarts, "tasks_skipped_quarantined": quarantined})
                run_dir.write_trajectories(step, batch.trajectory_rows(cfg.run.trajectories_per_step))
                print(status_line(metrics, cfg.trainer.total_steps), flush=True)  # the log's; the console's:
                bar.update(step, progress_figure(metrics))
                supervisor.healed()
                watchdog.step_done(time.monotonic())
                if cadence.due(step, cfg.trainer.total_steps, time.perf_counter()):
                    cost_s = save_run_checkpoint(fleet, run_dir.checkpoints, step)
                    cadence.saved(time.perf_counter(), cost_s)
                    print(f"[swerve] checkpoint at step {step} saved in {cost_s:.2f}s "
                          f"({cadence.checkpoint_overhead_fraction(time.perf_counter()):.1%} of wall time so far)",
                          flush=True)
                if step >= cfg.trainer.total_steps or time.monotonic() >= next_plot_s:
                    write_plots(run_dir.rows(), run_dir.path)
                    next_plot_s = time.monotonic() + plot_gap_s
            bar.finish()
            # The trained policy as an HF directory: what `swerve eval` and the engines load.
            fleet.trainers.export_hf(str(run_dir.path / "policy"))
            results = shutdown(fleet, grace_s=cfg.rollout.shutdown_grace_s)
            accounting = fleet.collector.accounting()
            faults = fault_report(results, engine_kills.injected, fleet.engine_set.restarts)
            run_dir.write_accounting({**accounting, "episode_actors": results, "faults": faults,
                                      "restarts": supervisor.restarts(fleet.engine_set.restarts,
                                                                      fleet.episode_replacements),
                                      "heal_s": supervisor.heal_s,
                                      "engine_replacements": fleet.engine_set.restarts,
                                      "episode_replacements": fleet.episode_replacements,
                                      "tasks_skipped_quarantined": quarantined})
            run_dir.record_event("done", step=step, version=version)
            return run_dir.path
        except RoleFailure as failure:
            print(failure_dump(failure, fleet.engine_set.stats(), len(fleet.episodes)), flush=True)
            run_dir.record_event("rollback", role=failure.role, cause=failure.cause)
            supervisor.failed(failure)  # raises past the bounds
            supervisor.fleet_ended(fleet.engine_set.restarts, fleet.episode_replacements)
            resume = latest_checkpoint(str(run_dir.checkpoints)) is not None
        finally:
            kill(fleet)
