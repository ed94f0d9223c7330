"""Checkpoints that survive a crash at any moment, and Hugging Face directories on disk.

Layout of one checkpoint (`<root>/step-00000012/`):

    meta.json                 step, version, world size, backend (rank 0, written last)
    model.safetensors         full weights, Hugging Face names (rank 0)
    optimizer-rank00000.pt    optimizer state: rank 0 only when every rank holds the same state
                              (torch backend, data parallel); every rank its own when the
                              optimizer is sharded (megatron TP/EP: each rank's state belongs
                              to its own parameter shards)
    rng-rank00000.pt          python / numpy / torch (and CUDA) RNG states, every rank
    extra.pt                  the caller's `extra` dict, pickled (rank 0)

Atomicity: every rank writes into `<root>/.tmp-step-00000012/` and fsyncs its files; after a
barrier rank 0 writes meta.json, fsyncs the directory, renames it to its final name (rename
is atomic) and fsyncs the root. A process killed at any point before the rename leaves only a
`.tmp-` directory, which readers ignore and the next save deletes: the previous checkpoint
stays the latest. Across nodes `root` must be a shared filesystem.

Test hook: with SWERVE_FAULT_CHECKPOINT_PAUSE_S set, rank 0 sleeps that long after the files
and meta.json are in `.tmp-...` and before the rename, so a restart test can kill the run
mid-save (the driver forwards the variable to its actors, see actors.launch).
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
from typing import Callable, Optional

import numpy as np
import torch

from policies.hf_dir import MODEL, fsync_dir, fsync_file, write_safetensors

META = "meta.json"
EXTRA = "extra.pt"
_STEP_DIR = re.compile(r"^step-(\d+)$")
PAUSE_ENV = "SWERVE_FAULT_CHECKPOINT_PAUSE_S"


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def rank_file(kind: str, rank: int) -> str:
    return f"{kind}-rank{rank:05d}.pt"


def list_checkpoints(root: str) -> list[tuple[int, str]]:
    """Complete checkpoints under root, oldest first."""
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        match = _STEP_DIR.match(name)
        path = os.path.join(root, name)
        if match and os.path.isfile(os.path.join(path, META)):
            found.append((int(match.group(1)), path))
    return sorted(found)


def latest_checkpoint(root: str) -> Optional[str]:
    found = list_checkpoints(root)
    return found[-1][1] if found else None


def resolve(path: str) -> str:
    """A checkpoint directory itself, or the latest one under a checkpoints root."""
    if os.path.isfile(os.path.join(path, META)):
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        raise FileNotFoundError(f"no complete checkpoint in {path!r}")
    return latest


# -- RNG -------------------------------------------------------------------------------------
def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    torch.manual_seed(seed)


# -- durable writes --------------------------------------------------------------------------
def write_torch(obj) -> Callable[[str], None]:
    return lambda path: torch.save(obj, path)


def write_json(obj) -> Callable[[str], None]:
    def write(path: str) -> None:
        with open(path, "w") as handle:
            json.dump(obj, handle, indent=2, sort_keys=True)
    return write


def _barrier() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()


def save(root: str, step: int, rank: int, files: dict[str, Callable[[str], None]], meta: dict,
         keep: int, barrier: Callable[[], None] = _barrier) -> str:
    """Collective: every rank passes the files it writes (name -> writer(path)); rank 0's
    `meta` is written last. Returns the checkpoint directory."""
    final = os.path.join(root, step_dir_name(step))
    tmp = os.path.join(root, ".tmp-" + step_dir_name(step))
    if rank == 0:
        os.makedirs(root, exist_ok=True)
        _remove_debris(root)
        os.makedirs(tmp)
    barrier()
    for name, write in files.items():
        path = os.path.join(tmp, name)
        write(path)
        fsync_file(path)
    barrier()
    if rank == 0:
        write_json(meta)(os.path.join(tmp, META))
        fsync_file(os.path.join(tmp, META))
        fsync_dir(tmp)
        pause_s = float(os.environ.get(PAUSE_ENV) or 0)
        if pause_s:
            print(f"[swerve] checkpoint {step_dir_name(step)} paused before its rename ({PAUSE_ENV})", flush=True)
            time.sleep(pause_s)
        if os.path.exists(final):  # the same step saved again (a resumed run): replace it
            os.rename(final, os.path.join(root, ".old-" + step_dir_name(step)))
        os.rename(tmp, final)
        fsync_dir(root)
        _remove_debris(root)
        prune(root, keep)
    barrier()
    return final


def prune(root: str, keep: int) -> None:
    for _, path in list_checkpoints(root)[: -max(keep, 1)]:
        shutil.rmtree(path, ignore_errors=True)


def _remove_debris(root: str) -> None:
    for name in os.listdir(root):
        if name.startswith((".tmp-", ".old-")):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def read_meta(path: str) -> dict:
    with open(os.path.join(path, META)) as handle:
        return json.load(handle)


def read_torch(path: str):
    # Our own files: optimizer states, RNG states (numpy tuples) and the caller's extra dict.
    return torch.load(path, map_location="cpu", weights_only=False)


def read_safetensors(path: str) -> dict:
    from safetensors.torch import load_file

    return load_file(path)
