"""TrainerShard: one rank of the training group, as a Ray actor (the step itself: policies/training/trainer.py).

Call order (the driver's, over Ray):

    shard = TrainerShard(rank, world, cfg, model_path, seed)   # stores config, builds nothing
    addr, port = shard0.rendezvous_address()                     # rank 0 only
    shard.join(addr, port)                                       # every rank: process group, then
                                                                 # the Trainer (backend, optimizer)
    shard.dp_rank_and_size()                                     # how the driver splits batches
    shard.load_checkpoint(dir)                                   # optional: resume
    shard.train_step(samples, temperature, global_loss_tokens)   # per update, every rank
    shard.export_weights() (meta, safetensors bytes) / hf_state_dict() / export_hf(dir) / broadcast_weights(...)
    shard.save_checkpoint(dir, step, extra)                      # every rank (collective)
    shard.close()

Without `join` (tests, world size 1) the trainer is built on first use; a backend that needs a
process group even then (megatron) makes a one-rank group of its own.

Rendezvous the way Ray Train does it, without its port race: rank 0 opens the group's store
itself (on `trainer.master_port`, or a port the OS picks while binding it, so nothing can take it
between choosing and listening) and holds it; every rank gets RANK / WORLD_SIZE / LOCAL_RANK and
joins through that store.
"""
from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist

from configs.schema import DeadlinesConfig, TrainerConfig
from policies.device import role_device
from policies.hf_dir import write_hf_dir
from policies.sample_types import TrainSample
from policies.engines.process import weights_file_bytes
from policies.engines.protocol import WEIGHT_UPDATE_GROUP
from policies.training.trainer import Trainer
from policies.training.trainer_backend import backend_class

# How long a rank waits for the others at the rendezvous; the driver's TrainerGroup.join holds
# its own, shorter deadline (deadlines.setup_s) over the whole join.
_STORE_TIMEOUT = timedelta(minutes=30)


class TrainerShard:
    def __init__(self, rank: int, world_size: int, cfg: TrainerConfig, model_path: str, seed: int):
        torch.set_num_threads(cfg.torch_threads)
        self.rank, self.world_size, self.cfg = rank, world_size, cfg
        self.model_path, self.seed = model_path, seed
        backend_class(cfg.backend)  # fails fast on an unknown backend, before any rendezvous
        self.trainer: Optional[Trainer] = None
        self.time_export_s = 0.0
        self._weight_group: Optional[dist.ProcessGroup] = None
        self._store: Optional[dist.TCPStore] = None  # rank 0: the rendezvous store it listens on

    # -- set-up ------------------------------------------------------------------------
    def rendezvous_address(self) -> tuple[str, int]:
        """Called on rank 0 only: listen for the group's store now (port 0: the OS picks one as it
        binds), so the port handed out is already ours, never merely free a moment ago."""
        if self._store is None:
            self._store = dist.TCPStore(self.cfg.master_addr, self.cfg.master_port, self.world_size, is_master=True,
                                        timeout=_STORE_TIMEOUT, wait_for_workers=False)
        return self.cfg.master_addr, self._store.port

    def join(self, master_addr: str, master_port: int) -> None:
        """Join the training process group, then build the trainer (megatron needs the group)."""
        os.environ.update(
            MASTER_ADDR=master_addr, MASTER_PORT=str(master_port), RANK=str(self.rank),
            WORLD_SIZE=str(self.world_size), LOCAL_RANK="0",
        )
        if master_addr.startswith("127."):
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        if not dist.is_initialized():
            # NCCL binds each rank to its current device: the shard's own GPU, set first.
            backend = "nccl" if role_device().type == "cuda" else "gloo"
            # Rank 0 listens already if it handed out the address; else it hosts on the port given.
            store = self._store or dist.TCPStore(master_addr, master_port, self.world_size, is_master=self.rank == 0,
                                                 timeout=_STORE_TIMEOUT, wait_for_workers=False)
            dist.init_process_group(backend, store=store, rank=self.rank, world_size=self.world_size)
        self._build()

    def _built(self) -> Trainer:
        if self.trainer is not None:
            return self.trainer
        if self.world_size > 1 and not dist.is_initialized():
            raise RuntimeError(f"trainer rank {self.rank} of {self.world_size}: call join() before training")
        self._build()
        return self.trainer

    def _build(self) -> None:
        if self.trainer is None:
            self.trainer = Trainer(self.cfg, self.model_path, self.rank, self.world_size, self.seed)

    def dp_rank_and_size(self) -> tuple[int, int]:
        """This rank's place in the data-parallel group (fixed once the trainer is built): split
        batches by it (TP peers get the same samples)."""
        trainer = self._built()
        return trainer.dp_rank, trainer.dp_size

    # -- training ----------------------------------------------------------------------
    def train_step(self, samples: list[TrainSample], temperature: float, global_loss_tokens,
                   global_samples=None) -> dict:
        """One update; its stats carry the new policy version (see policies.training.trainer.Trainer.train_step)."""
        return self._built().train_step(samples, temperature, global_loss_tokens, global_samples)

    # -- weights out -------------------------------------------------------------------
    def hf_state_dict(self) -> dict:
        """Full weights under HF names, on CPU (what the driver puts in the object store).
        Collective on sharded backends: every rank calls it."""
        backend = self._built().backend
        t0 = time.perf_counter()
        state = {k: v.cpu() for k, v in backend.hf_state_dict().items()}
        self.time_export_s = time.perf_counter() - t0
        return state

    def export_hf(self, out_dir: str) -> str:
        """A model directory `AutoModelForCausalLM.from_pretrained` loads (config + safetensors +
        tokenizer), for engines that load from disk and for the trained policy; rank 0 writes,
        every rank must call. Returns out_dir."""
        backend = self._built().backend
        t0 = time.perf_counter()
        state = backend.hf_state_dict()
        if self.rank == 0:
            write_hf_dir(out_dir, state, self.model_path, self._tied_embeddings())
        self.time_export_s = time.perf_counter() - t0
        return os.path.abspath(out_dir)

    def export_weights(self) -> tuple[dict, bytes]:
        """The weights for the engines as two return values: call it with `num_returns=2`, so the
        driver hands the weights' ObjectRef to the engines without fetching it (the bytes go
        from this actor to the engines through the object store, never through the driver).
        Returns ({"version", "time_export_s"}, on rank 0 the HF state_dict as a safetensors file's
        bytes (weights_file_bytes: the engine actors write it without torch), b"" on the others).
        Collective on sharded backends: every rank calls it."""
        t0 = time.perf_counter()
        state = self.hf_state_dict()
        weights = weights_file_bytes(state) if self.rank == 0 else b""
        self.time_export_s = time.perf_counter() - t0
        meta = {"version": self._built().version, "time_export_s": self.time_export_s}
        return meta, weights

    def init_weight_update_group(self, master_address: str, master_port: int, world_size: int,
                                 group_name: str = WEIGHT_UPDATE_GROUP, backend: str = "nccl",
                                 timeout_s: float = DeadlinesConfig.weight_sync_s) -> None:
        """Rank 0: host the NCCL group the engines join (SGLang /init_weights_update_group,
        rank_offset 1); call it concurrently with the engines' init calls. timeout_s
        (deadlines.weight_sync_s): how long the group waits for the engines."""
        from policies.engines.weight_broadcast import init_weight_update_group

        if self.rank == 0:
            self._weight_group = init_weight_update_group(master_address, master_port, world_size, 0,
                                                          group_name, backend, timeout_s)

    def broadcast_weights(self, engines: list, version: int, group_name: str = WEIGHT_UPDATE_GROUP,
                          dtype: str = "", timeout_s: float = DeadlinesConfig.weight_sync_s) -> dict:
        """Every rank calls it (gathering sharded weights is collective); rank 0 broadcasts to
        `engines` (EngineActor handles) bucket by bucket, cast to `dtype` (e.g. "bfloat16", the
        engines' dtype; "" keeps the trainer's). Each bucket's engine calls must answer within
        timeout_s (deadlines.weight_sync_s); a silent or dead engine fails the broadcast, named.
        Returns timings."""
        from actors.cluster.roles import wait
        from policies.engines.weight_broadcast import broadcast_weights_nccl

        backend = self._built().backend
        t0 = time.perf_counter()
        state = backend.hf_state_dict()  # stays on the GPU: no round trip through the CPU
        self.time_export_s = time.perf_counter() - t0
        stats: dict = {"version": version}
        if self.rank == 0:
            if self._weight_group is None:
                raise RuntimeError("broadcast_weights: call init_weight_update_group first")

            def announce(names, dtypes, shapes):
                return [e.update_weights_from_distributed.remote(names, dtypes, shapes, version, group_name)
                        for e in engines]

            def answered(refs):
                return wait(refs, [f"engine-{i}" for i in range(len(refs))], timeout_s,
                            "update_weights_from_distributed")

            stats.update(broadcast_weights_nccl(state.items(), self._weight_group, announce, answered,
                                                self.cfg.weight_bucket_mb << 20,
                                                dtype=getattr(torch, dtype) if dtype else None))
        stats["time_export_s"] = self.time_export_s
        stats["time_weight_sync_s"] = time.perf_counter() - t0
        return stats

    def _tied_embeddings(self) -> bool:
        with open(os.path.join(self.model_path, "config.json")) as handle:
            return bool(json.load(handle).get("tie_word_embeddings", False))

    # -- checkpoints -------------------------------------------------------------------
    def save_checkpoint(self, root: str, step: int, extra: Optional[dict] = None) -> str:
        """Collective: every rank calls it (see policies.training.trainer.Trainer.save_checkpoint)."""
        return self._built().save_checkpoint(root, step, extra)

    def load_checkpoint(self, path: str) -> dict:
        """Restore from a checkpoint directory (checksums verified), or the newest valid one
        under a checkpoints root. Every rank must get the same directory: pass the one the
        driver resolved (actors.stages.restart.resume_run), so ranks cannot pick different ones.
        Returns {"step", "version", "extra", "path"}."""
        return self._built().load_checkpoint(path)

    def close(self) -> None:
        if self.trainer is not None:
            self.trainer.close()
            self.trainer = None
        if self._weight_group is not None:
            dist.destroy_process_group(self._weight_group)
            self._weight_group = None
        if dist.is_initialized():
            dist.destroy_process_group()
        self._store = None
