"""Checkpoints of a whole run: trainer state plus the collector's books, and resuming from them.

The collector's snapshot rides in the trainer checkpoint's `extra`, so model, optimizer,
version and "what was admitted, buffered, trained" are saved in one atomic step.
"""
from __future__ import annotations

import time
from pathlib import Path

import ray

from policies.checkpoint import latest_checkpoint
from actors.launch import Fleet


def save_run_checkpoint(fleet: Fleet, root: Path, step: int) -> float:
    """Every shard saves (collective); returns the seconds it took."""
    started = time.perf_counter()
    snapshot = ray.get(fleet.collector.snapshot.remote())
    ray.get([t.save_checkpoint.remote(str(root), step, {"collector": snapshot}) for t in fleet.trainers])
    return time.perf_counter() - started


def resume_run(fleet: Fleet, root: Path) -> tuple[int, int, int]:
    """Restore trainers and collector from the newest checkpoint: (step, version, re-admitted work)."""
    if latest_checkpoint(str(root)) is None:
        raise FileNotFoundError(f"nothing to resume: no checkpoint under {root} (start without --resume)")
    infos = ray.get([t.load_checkpoint.remote(str(root)) for t in fleet.trainers])
    step, version = infos[0]["step"], infos[0]["version"]
    readmitted = ray.get(fleet.collector.restore.remote(infos[0]["extra"]["collector"]))
    return step, version, readmitted
