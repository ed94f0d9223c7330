"""Opening the endless task stream of a source (tasks.split=stream, envs/tasks/stream.py): the micro
stream, or a local repository read as a stream of its own bugs (tasks.format=synth).

Its own module, above the loaders and the synth stream, since the synth stream reads rows through
the loaders (a stream of SWE-smith rows) and the loaders must not import it back.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

from configs.schema import TasksConfig
from envs.tasks.loaders import SYNTH_FORMAT
from envs.tasks.loaders.common import read_rows
from envs.tasks.micro_stream import MicroStream
from envs.tasks.stream import STREAM_SPLIT, TaskStream
from envs.tasks.synth.stream import SynthStream


def open_stream(cfg: TasksConfig) -> TaskStream:
    """The endless stream of fresh tasks of `cfg.source` (tasks.split=stream, envs/tasks/stream.py)."""
    if cfg.source == "micro":
        return MicroStream(cfg.stream_seed)
    if cfg.format == SYNTH_FORMAT:
        return SynthStream(cfg.source, replace(cfg.synth, seed=cfg.stream_seed), lookahead=cfg.stream_lookahead,
                           exclude_patches=_held_out_patches(cfg.stream_held_out))
    raise ValueError(f"tasks.source={cfg.source!r} has no stream: tasks.split={STREAM_SPLIT} needs tasks.source=micro, "
                     f"or a local Python repository with tasks.format={SYNTH_FORMAT}")


def _held_out_patches(paths: Sequence[str]) -> list[str]:
    """The bug patches of held-out SWE-smith rows (tasks.stream_held_out): a row without one is an
    error naming it, since a held-out task the stream could hand out would leak into training."""
    patches = []
    for path in paths:
        for where, row in read_rows(Path(path).expanduser()):
            if not isinstance(row, dict) or not isinstance(row.get("patch"), str) or not row["patch"]:
                raise ValueError(f"tasks.stream_held_out: {path} ({where}) is not a SWE-smith row with a patch")
            patches.append(row["patch"])
    return patches
