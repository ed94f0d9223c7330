"""Checkpoints that survive a crash at any moment, and Hugging Face directories on disk.

Layout of one checkpoint (`<root>/step-00000012/`):

    meta.json                 step, version, world size, backend, and the manifest: every
                              other file's size and sha256 (rank 0, written last)
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
stays the latest. Pruning renames a checkpoint to `.old-` before deleting it, so a kill
mid-prune leaves debris too, never a half-deleted checkpoint. Across nodes `root` must be a
shared filesystem.

Integrity: a rename cannot protect against what happens to the bytes later (a filesystem
that lied about fsync, a disk error, someone's `truncate`). Each rank hashes its files while
writing them (torch.save and JSON pass through the hash; safetensors writes its own file, so
that one is hashed right after, from the page cache) and leaves its part of the manifest in
`files-rank<r>.json`; rank 0 merges the parts into meta.json, which carries a digest of
itself, and deletes them before the rename. `check` is the one definition of "complete and
valid" (`list_checkpoints`, `latest_checkpoint` and `resolve` all use it): meta.json parses
and matches its digest, and every manifest file is there with its size and sha256. Readers
skip an invalid checkpoint with a warning naming it and its bad file, and fall back to the
newest valid one. A checkpoint from before manifests (no "files" in meta.json) is loaded with
a warning that it is unverified.

Test hook: with SWERVE_FAULT_CHECKPOINT_PAUSE_S set, rank 0 sleeps that long after the files
and meta.json are in `.tmp-...` and before the rename, so a restart test can kill the run
mid-save (the driver forwards the variable to its actors, see actors.fleet.launch).
"""
from __future__ import annotations

import glob
import hashlib
import json
import logging
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
# meta.json's keys for the manifest ({file name: {"bytes", "sha256"}}) and its own digest.
FILES = "files"
META_SHA256 = "meta_sha256"
_STEP_DIR = re.compile(r"^step-(\d+)$")
_RANK_MANIFEST = "files-rank{rank:05d}.json"
PAUSE_ENV = "SWERVE_FAULT_CHECKPOINT_PAUSE_S"

log = logging.getLogger(__name__)

# A writer puts one file at the path it is given and returns that file's sha256 (hex).
Writer = Callable[[str], str]


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def rank_file(kind: str, rank: int) -> str:
    return f"{kind}-rank{rank:05d}.pt"


# -- what is a usable checkpoint --------------------------------------------------------------
def _step_dirs(root: str) -> list[tuple[int, str]]:
    """Every final-named checkpoint directory under root, valid or not, oldest first."""
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        match = _STEP_DIR.match(name)
        if match and os.path.isdir(os.path.join(root, name)):
            found.append((int(match.group(1)), os.path.join(root, name)))
    return sorted(found)


def file_sha256(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _meta_digest(meta: dict) -> str:
    body = {k: v for k, v in meta.items() if k != META_SHA256}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def check(path: str) -> Optional[str]:
    """What makes the checkpoint at `path` unusable (naming the bad file), or None when it is
    complete and valid. Reads every file of the manifest once to hash it."""
    meta_path = os.path.join(path, META)
    if not os.path.isfile(meta_path):
        return f"{META} is missing"
    with open(meta_path, "rb") as handle:
        raw = handle.read()
    try:
        meta = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:  # a damaged meta.json is a finding, not a crash
        return f"{META} does not parse ({error})"
    if not isinstance(meta, dict):
        return f"{META} is not a JSON object"
    if FILES not in meta:
        log.warning("checkpoint %s has no checksums (written before they were recorded): using it unverified", path)
        return None
    if meta.get(META_SHA256) != _meta_digest(meta):
        return f"{META} does not match its own digest"
    for name, want in sorted(meta[FILES].items()):
        file_path = os.path.join(path, name)
        if not os.path.isfile(file_path):
            return f"{name} is missing"
        size = os.path.getsize(file_path)
        if size != want["bytes"]:
            return f"{name} has {size} bytes, {want['bytes']} were written"
        if file_sha256(file_path) != want["sha256"]:
            return f"{name} does not match its sha256"
    return None


def _newest_valid(root: str) -> tuple[Optional[str], list[str]]:
    """The newest valid checkpoint under root (None if there is none) and the problems of the
    newer ones it skipped, each already logged."""
    skipped = []
    for _, path in reversed(_step_dirs(root)):
        problem = check(path)
        if problem is None:
            return path, skipped
        log.warning("checkpoint %s is not usable: %s; falling back to an older one", path, problem)
        skipped.append(f"{os.path.basename(path)}: {problem}")
    return None, skipped


def list_checkpoints(root: str) -> list[tuple[int, str]]:
    """Complete and valid checkpoints under root (`check`), oldest first; the others are logged."""
    found = []
    for step, path in _step_dirs(root):
        problem = check(path)
        if problem is None:
            found.append((step, path))
        else:
            log.warning("checkpoint %s is not usable: %s", path, problem)
    return found


def latest_checkpoint(root: str) -> Optional[str]:
    """The newest complete and valid checkpoint under root, or None."""
    return _newest_valid(root)[0]


def resolve(path: str) -> str:
    """A checkpoint directory itself (it must be valid), or the newest valid one under a
    checkpoints root (newer invalid ones are skipped with a warning)."""
    if _STEP_DIR.match(os.path.basename(os.path.normpath(path))) or os.path.isfile(os.path.join(path, META)):
        problem = check(path)
        if problem is not None:
            raise ValueError(f"checkpoint {path} is not usable: {problem}; pass its checkpoints root to "
                             f"fall back to an older one, or start without --resume")
        return path
    latest, skipped = _newest_valid(path)
    if latest is not None:
        return latest
    if skipped:
        raise FileNotFoundError(f"nothing to resume: no valid checkpoint under {path!r} ({'; '.join(skipped)}); "
                                f"start without --resume (the invalid checkpoints are left there to inspect)")
    raise FileNotFoundError(f"nothing to resume: no checkpoint under {path!r} (start without --resume)")


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
class _HashingFile:
    """A write-only file that hashes every byte on its way to disk: one pass, no read-back."""

    def __init__(self, handle):
        self.handle, self.sha256 = handle, hashlib.sha256()

    def write(self, data) -> int:
        self.sha256.update(data)
        return self.handle.write(data)

    def flush(self) -> None:
        self.handle.flush()


def write_torch(obj) -> Writer:
    def write(path: str) -> str:
        with open(path, "wb") as handle:
            hashing = _HashingFile(handle)
            torch.save(obj, hashing)  # a file object: torch streams its zip archive through write()
        return hashing.sha256.hexdigest()
    return write


def write_json(obj) -> Writer:
    def write(path: str) -> str:
        data = json.dumps(obj, indent=2, sort_keys=True).encode()
        with open(path, "wb") as handle:
            handle.write(data)
        return hashlib.sha256(data).hexdigest()
    return write


def write_model(state: dict) -> Writer:
    """model.safetensors: safetensors writes the file itself (no stream to hash on the way), so
    it is hashed right after, while its pages are still cached."""
    def write(path: str) -> str:
        write_safetensors(state)(path)
        return file_sha256(path)
    return write


def write_meta(directory: str, meta: dict) -> None:
    """meta.json with its own digest (what `check` compares), fsynced."""
    path = os.path.join(directory, META)
    write_json({**meta, META_SHA256: _meta_digest(meta)})(path)
    fsync_file(path)


def _barrier() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()


def _merge_manifests(tmp: str) -> dict:
    """Rank 0, after every rank wrote: the ranks' manifest parts as one {name: entry}, the parts
    deleted; every file in the directory must be in it."""
    files: dict = {}
    parts = sorted(glob.glob(os.path.join(tmp, _RANK_MANIFEST.replace("{rank:05d}", "*"))))
    for part in parts:
        with open(part) as handle:
            entries = json.load(handle)
        doubled = sorted(set(entries) & set(files))
        if doubled:
            raise RuntimeError(f"checkpoint files {doubled} were written by two ranks")
        files.update(entries)
    for part in parts:
        os.remove(part)
    unlisted = sorted(set(os.listdir(tmp)) - set(files))
    if unlisted:
        raise RuntimeError(f"checkpoint {tmp} holds files no rank recorded: {unlisted}")
    return files


def save(root: str, step: int, rank: int, files: dict[str, Writer], meta: dict,
         keep: int, barrier: Callable[[], None] = _barrier) -> str:
    """Collective: every rank passes the files it writes (name -> writer(path) returning the
    file's sha256); rank 0's `meta` is written last, with every rank's files' sizes and
    sha256s. Returns the checkpoint directory."""
    if FILES in meta or META_SHA256 in meta:
        raise ValueError(f"meta keys {FILES!r} and {META_SHA256!r} are the checkpoint's own")
    final = os.path.join(root, step_dir_name(step))
    tmp = os.path.join(root, ".tmp-" + step_dir_name(step))
    if rank == 0:
        os.makedirs(root, exist_ok=True)
        _remove_debris(root)
        os.makedirs(tmp)
    barrier()
    manifest = {}
    for name, write in files.items():
        path = os.path.join(tmp, name)
        manifest[name] = {"sha256": write(path), "bytes": os.path.getsize(path)}
        fsync_file(path)
    write_json(manifest)(os.path.join(tmp, _RANK_MANIFEST.format(rank=rank)))
    barrier()
    if rank == 0:
        write_meta(tmp, {**meta, FILES: _merge_manifests(tmp)})
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
    """Keep the newest `keep` checkpoint directories (the one just saved is valid: its hashes
    were taken as it was written). Each goes to `.old-` first, so a kill mid-delete leaves
    debris for the next save, not a checkpoint missing files."""
    for _, path in _step_dirs(root)[: -max(keep, 1)]:
        old = os.path.join(root, ".old-" + os.path.basename(path))
        os.rename(path, old)
        shutil.rmtree(old, ignore_errors=True)


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
