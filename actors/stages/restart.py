"""Checkpoints of a whole run: when to save, the trainer state plus the collector's books, and
resuming from them.

The collector's snapshot rides in the trainer checkpoint's `extra`, so model, optimizer,
version and "what was admitted, buffered, trained" are saved in one atomic step.
"""
from __future__ import annotations

import time
from pathlib import Path

from configs.schema import TrainerConfig
from policies.training.checkpoint import resolve
from actors.fleet.launch import Fleet


class CheckpointCadence:
    """When the driver saves, and what saving costs it.

    Due after the last step, every trainer.checkpoint_interval steps (when > 0), and once
    trainer.checkpoint_every_s seconds (when > 0) have passed since the previous save ended
    (or since `start_s`, the run's start or resume): so a crash loses at most that much
    training plus the step in progress, and a slow save is never followed straight by another.
    All times are seconds of one monotonic clock (the driver's time.perf_counter())."""

    def __init__(self, cfg: TrainerConfig, start_s: float):
        if cfg.checkpoint_interval < 0 or cfg.checkpoint_every_s < 0:
            raise ValueError(f"trainer.checkpoint_interval ({cfg.checkpoint_interval}) and "
                             f"trainer.checkpoint_every_s ({cfg.checkpoint_every_s}) must be >= 0 (0: off)")
        self.interval_steps, self.every_s = cfg.checkpoint_interval, cfg.checkpoint_every_s
        self.start_s = self.last_save_end_s = start_s
        self.time_checkpoint_s = 0.0  # the last save's cost
        self.total_save_s = 0.0
        self.saves = 0

    def due(self, step: int, total_steps: int, now_s: float) -> bool:
        if step >= total_steps:
            return True
        if self.interval_steps and step % self.interval_steps == 0:
            return True
        return bool(self.every_s) and now_s - self.last_save_end_s >= self.every_s

    def saved(self, now_s: float, cost_s: float) -> None:
        """A save ended at now_s after cost_s seconds (save_run_checkpoint's return)."""
        self.last_save_end_s = now_s
        self.time_checkpoint_s = cost_s
        self.total_save_s += cost_s
        self.saves += 1

    def checkpoint_overhead_fraction(self, now_s: float) -> float:
        """Seconds spent saving / wall seconds since start_s."""
        wall_s = now_s - self.start_s
        return self.total_save_s / wall_s if wall_s > 0 else 0.0

    def metrics(self, now_s: float) -> dict[str, float]:
        """For a step's metrics row: the last save's cost and the share of wall time saving took."""
        return {"time_checkpoint_s": self.time_checkpoint_s,
                "checkpoint_overhead_fraction": self.checkpoint_overhead_fraction(now_s)}


def save_run_checkpoint(fleet: Fleet, root: Path, step: int) -> float:
    """Every shard saves (collective); returns the seconds it took."""
    started = time.perf_counter()
    fleet.trainers.save_checkpoint(str(root), step, {"collector": fleet.collector.snapshot()})
    return time.perf_counter() - started


def resume_run(fleet: Fleet, root: Path) -> tuple[int, int, int]:
    """Restore trainers and collector from the newest valid checkpoint: (step, version,
    re-admitted work). The checkpoint is chosen here, once (newer corrupt or half-written ones
    are skipped with a warning), and every shard loads that directory, so no two ranks can
    fall back differently. Raises naming the fix (start without --resume) when there is none."""
    path = resolve(str(root))
    infos = fleet.trainers.load_checkpoint(path)
    step, version = infos[0]["step"], infos[0]["version"]
    readmitted = fleet.collector.restore(infos[0]["extra"]["collector"])
    return step, version, readmitted
