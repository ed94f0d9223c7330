"""TrainerShard: one rank of the training group, over a pluggable backend (torch | megatron).

Call order (the driver's, over Ray):

    shard = TrainerShard(rank, world, cfg, model_path, seed)   # stores config, builds nothing
    addr, port = shard0.rendezvous_address()                     # rank 0 only
    shard.join(addr, port)                                       # every rank: process group, then
                                                                 # backend + optimizer (+ reference)
    shard.load_checkpoint(dir)                                   # optional: resume
    shard.train_step(samples, temperature, global_loss_tokens)   # per update, every rank
    shard.export_weights() / hf_state_dict() / save_hf_weights(dir) / broadcast_weights(...)
    shard.save_checkpoint(dir, step, extra)                      # every rank (collective)
    shard.close()

Without `join` (tests, world size 1) the backend is built on first use; a backend that needs a
process group (megatron) then joins a one-rank group on loopback by itself.

Rendezvous the way Ray Train does it: rank 0 picks the address and port, every rank gets
RANK / WORLD_SIZE / LOCAL_RANK and joins. Gradients are summed over the backend's data-parallel
group; each rank's loss is already divided by the global token count, so the sum is the
token-level mean over the whole batch.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Optional

import torch
import torch.distributed as dist

from policies import checkpoint as ckpt
from actors.trajectory import TrainSample
from configs.schema import TrainerConfig
from policies.hf_dir import write_hf_dir
from policies.losses import grpo_loss
from policies.trainer_backend import backend_class, clip_grad_norm, optimizer_is_sharded, trainable
from policies.server.process import free_port


def pad_samples(samples: list[TrainSample]) -> dict[str, torch.Tensor]:
    length = max(len(s.token_ids) for s in samples)

    def padded(rows, fill, dtype):
        return torch.tensor([list(r) + [fill] * (length - len(r)) for r in rows], dtype=dtype)

    loss_mask = padded([s.loss_mask for s in samples], 0, torch.float32)
    loss_mask[:, 0] = 0.0  # the first token has no log-prob (nothing precedes it)
    return {
        "token_ids": padded([s.token_ids for s in samples], 0, torch.long),
        "attention_mask": padded([[1] * len(s.token_ids) for s in samples], 0, torch.long),
        "loss_mask": loss_mask,
        "behavior_logprobs": padded([s.behavior_logprobs for s in samples], 0.0, torch.float32),
        # Policy version of each generated token (-1: unknown or not generated).
        "versions": padded([s.versions or [-1] * len(s.token_ids) for s in samples], -1, torch.long),
        "advantages": torch.tensor([s.advantage for s in samples], dtype=torch.float32),
    }


class TrainerShard:
    def __init__(self, rank: int, world_size: int, cfg: TrainerConfig, model_path: str, seed: int):
        torch.set_num_threads(cfg.torch_threads)
        self.rank, self.world_size, self.cfg = rank, world_size, cfg
        self.model_path, self.seed = model_path, seed
        self.backend_cls = backend_class(cfg.backend)  # fails fast on an unknown backend
        ckpt.seed_everything(seed + rank)
        self.backend: Any = None
        self.reference: Any = None  # frozen initial policy, only when kl_coef > 0
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.version = 0
        self.time_export_s = 0.0
        self._weight_group: Optional[dist.ProcessGroup] = None

    # -- set-up ------------------------------------------------------------------------
    def rendezvous_address(self) -> tuple[str, int]:
        """Called on rank 0 only."""
        return self.cfg.master_addr, self.cfg.master_port or free_port(self.cfg.master_addr)

    def join(self, master_addr: str, master_port: int) -> None:
        """Join the training process group, then build the backend (megatron needs the group)."""
        os.environ.update(
            MASTER_ADDR=master_addr, MASTER_PORT=str(master_port), RANK=str(self.rank),
            WORLD_SIZE=str(self.world_size), LOCAL_RANK="0",
        )
        if master_addr.startswith("127."):
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        if not dist.is_initialized():
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            dist.init_process_group(backend, rank=self.rank, world_size=self.world_size)
        self._build()

    def _ensure_built(self) -> None:
        if self.backend is not None:
            return
        if self.world_size > 1 and not dist.is_initialized():
            raise RuntimeError(f"trainer rank {self.rank} of {self.world_size}: call join() before training")
        if self.cfg.backend != "torch" and not dist.is_initialized():
            self.join(*self.rendezvous_address())  # a one-rank group on loopback
        else:
            self._build()

    def _build(self) -> None:
        if self.backend is not None:
            return
        self.backend = self.backend_cls(self.cfg, self.model_path, self.rank, self.world_size)
        self.optimizer = torch.optim.AdamW(
            trainable(self.backend.parameters()), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay,
            betas=tuple(self.cfg.betas),
        )
        if self.cfg.kl_coef > 0:
            # The reference is the initial policy: the checkpoint this run started from (also
            # after a resume), held frozen beside the trained copy.
            self.reference = self.backend_cls(self.cfg, self.model_path, self.rank, self.world_size)
            for p in self.reference.parameters():
                p.requires_grad_(False)

    @property
    def model(self):
        """The torch backend's HF model (tests and tools); other backends may not have one."""
        self._ensure_built()
        return getattr(self.backend, "model", None)

    def dp_rank_and_size(self) -> tuple[int, int]:
        """This rank's place in the data-parallel group: split batches by it (TP peers get the
        same samples)."""
        self._ensure_built()
        group = self.backend.data_parallel_group()
        if group is None:
            return 0, 1
        return dist.get_rank(group), dist.get_world_size(group)

    # -- training ----------------------------------------------------------------------
    def train_step(self, samples: list[TrainSample], temperature: float, global_loss_tokens,
                   global_samples=None) -> dict:
        """One update (policy version + 1) from this shard's share of a batch: `trainer.ppo_epochs`
        passes over it, each in `trainer.minibatches` optimizer steps (`minibatch_split`), all
        clipped against the proximal log-probs computed once before the first step.

        The global counts (over every data-parallel shard) are each minibatch's loss denominators
        (trainer.loss_aggregation), so shards' gradients sum to the whole minibatch's: one int per
        minibatch (a list), or one int when there is one minibatch. Default samples: this share's."""
        self._ensure_built()
        started = time.perf_counter()
        count = self.cfg.minibatches
        tokens = _per_minibatch(global_loss_tokens, count, "global_loss_tokens")
        rows = _per_minibatch(global_samples if global_samples is not None
                              else [len(m) for m in minibatch_split(samples, count)], count, "global_samples")
        stats: dict = {"samples": len(samples)}
        t0 = time.perf_counter()
        parts = []  # (padded minibatch, proximal log-probs, reference log-probs) per minibatch
        with torch.no_grad():
            for part in minibatch_split(samples, count):
                if not part:
                    parts.append(None)
                    continue
                batch = pad_samples(part)
                ids, attn = batch["token_ids"], batch["attention_mask"]
                proximal = self.backend.sequence_logprobs(ids, attn, temperature)
                ref = self.reference.sequence_logprobs(ids, attn, temperature) if self.reference else None
                parts.append((batch, proximal, ref))
        stats["time_logprob_s"] = time.perf_counter() - t0
        stats.update(_behavior_gap([p for p in parts if p is not None], self.version))
        self._set_lr()
        steps: list[dict] = []
        for _ in range(self.cfg.ppo_epochs):
            for index, part in enumerate(parts):
                steps.append(self._optimizer_step(part, temperature, max(tokens[index], 1), max(rows[index], 1)))
        self.version += 1
        stats.update(_combine_steps(steps), version=self.version, optimizer_steps=len(steps),
                     lr=self.optimizer.param_groups[0]["lr"], time_actor_update_s=time.perf_counter() - started)
        return stats

    def _set_lr(self) -> None:
        """Linear warm-up over the first trainer.lr_warmup_steps updates (by policy version, so a
        resumed run continues the schedule where it was)."""
        warmup = self.cfg.lr_warmup_steps
        scale = min(1.0, (self.version + 1) / warmup) if warmup > 0 else 1.0
        for group in self.optimizer.param_groups:
            group["lr"] = self.cfg.lr * scale

    def _optimizer_step(self, part, temperature: float, num_tokens: int, num_sequences: int) -> dict:
        """Forward, loss, backward on one minibatch (None: this shard holds none of it, and still
        joins the gradient all-reduce), then clip and step."""
        self.optimizer.zero_grad(set_to_none=False)
        stats: dict = {"loss": 0.0}
        if part is not None:
            batch, proximal, ref = part
            logprobs = self.backend.sequence_logprobs(batch["token_ids"], batch["attention_mask"], temperature)
            dev = logprobs.device
            loss, loss_stats = grpo_loss(
                logprobs, proximal, batch["advantages"].to(dev), batch["loss_mask"].to(dev),
                clip_eps_low=self.cfg.clip_eps_low, clip_eps_high=self.cfg.clip_eps_high,
                behavior_logprobs=batch["behavior_logprobs"].to(dev), tis_cap=self.cfg.tis_cap,
                ref_logprobs=ref, kl_coef=self.cfg.kl_coef, num_tokens=num_tokens,
                aggregation=self.cfg.loss_aggregation, num_sequences=num_sequences,
            )
            loss.backward()
            stats.update(loss=loss.item(), **{k: float(v) for k, v in loss_stats.items()})
        self._all_reduce_grads()
        stats["grad_norm"] = clip_grad_norm(self.backend, self.cfg.max_grad_norm)
        self.optimizer.step()
        return stats

    def _all_reduce_grads(self) -> None:
        """Sum gradients over the data-parallel group (the backend's own reduction when it has
        one), in buckets of trainer.grad_bucket_mb."""
        own = getattr(self.backend, "all_reduce_grads", None)
        if own is not None:  # e.g. megatron: dense grads over DP, expert grads over expert-DP
            own()
            return
        params = trainable(self.backend.parameters())
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        group = self.backend.data_parallel_group()
        if group is None or dist.get_world_size(group) == 1:
            return
        limit = max(1, self.cfg.grad_bucket_mb) << 20
        bucket: list[torch.Tensor] = []
        size = 0
        for p in params:
            bucket.append(p.grad)
            size += p.grad.numel() * p.grad.element_size()
            if size >= limit:
                _all_reduce_flat(bucket, group)
                bucket, size = [], 0
        if bucket:
            _all_reduce_flat(bucket, group)

    # -- weights out -------------------------------------------------------------------
    def hf_state_dict(self) -> dict:
        """Full weights under HF names, on CPU (what the driver puts in the object store).
        Collective on sharded backends: every rank calls it."""
        self._ensure_built()
        t0 = time.perf_counter()
        state = {k: v.cpu() for k, v in self.backend.hf_state_dict().items()}
        self.time_export_s = time.perf_counter() - t0
        return state

    state_dict = hf_state_dict  # the name the driver used before

    def save_hf_weights(self, out_dir: str) -> str:
        """HF directory (config + safetensors + tokenizer) for engines that load from disk;
        rank 0 writes, every rank must call. Returns out_dir."""
        self._ensure_built()
        t0 = time.perf_counter()
        state = self.backend.hf_state_dict()
        if self.rank == 0:
            write_hf_dir(out_dir, state, self.model_path, self._tied_embeddings())
        self.time_export_s = time.perf_counter() - t0
        return os.path.abspath(out_dir)

    def export_hf(self, out_dir: str) -> str:
        """A model directory `AutoModelForCausalLM.from_pretrained` loads (the trained policy)."""
        return self.save_hf_weights(out_dir)

    def export_weights(self, out_dir: str = "") -> dict:
        """One call for the driver: {"version", "time_export_s"} plus "state_dict" (no out_dir:
        object-store path) or "path" (safetensors on disk)."""
        if out_dir:
            result: dict = {"path": self.save_hf_weights(out_dir)}
        else:
            result = {"state_dict": self.hf_state_dict()}
        return {**result, "version": self.version, "time_export_s": self.time_export_s}

    def init_weight_update_group(self, master_address: str, master_port: int, world_size: int,
                                 group_name: str = "weight_update_group", backend: str = "nccl") -> None:
        """Rank 0: host the NCCL group the engines join (SGLang /init_weights_update_group,
        rank_offset 1); call it concurrently with the engines' init calls."""
        from policies.weight_broadcast import init_weight_update_group

        if self.rank == 0:
            self._weight_group = init_weight_update_group(master_address, master_port, world_size, 0,
                                                          group_name, backend)

    def broadcast_weights(self, engines: list, version: int, group_name: str = "weight_update_group",
                          dtype: str = "") -> dict:
        """Every rank calls it (gathering sharded weights is collective); rank 0 broadcasts to
        `engines` (EngineActor handles) bucket by bucket, cast to `dtype` (e.g. "bfloat16", the
        engines' dtype; "" keeps the trainer's). Returns timings."""
        import ray

        from policies.weight_broadcast import broadcast_weights_nccl

        self._ensure_built()
        t0 = time.perf_counter()
        state = self.backend.hf_state_dict()  # stays on the GPU: no round trip through the CPU
        self.time_export_s = time.perf_counter() - t0
        stats: dict = {"version": version}
        if self.rank == 0:
            if self._weight_group is None:
                raise RuntimeError("broadcast_weights: call init_weight_update_group first")

            def announce(names, dtypes, shapes):
                return [e.update_weights_from_distributed.remote(names, dtypes, shapes, version, group_name)
                        for e in engines]

            stats.update(broadcast_weights_nccl(state.items(), self._weight_group, announce, ray.get,
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
        """Collective: every rank calls it. Rank 0 writes the full HF weights, `extra` and the
        metadata; the optimizer state is written by rank 0 alone when it is replicated (torch
        backend) and by every rank when sharded (megatron TP/EP: its own shard's state); every
        rank writes its RNG states. Keeps the last trainer.keep_checkpoints."""
        self._ensure_built()
        state = self.backend.hf_state_dict()
        files = {ckpt.rank_file("rng", self.rank): ckpt.write_torch(ckpt.rng_state())}
        if self.rank == 0 or optimizer_is_sharded(self.backend):
            files[ckpt.rank_file("optimizer", self.rank)] = ckpt.write_torch(self.optimizer.state_dict())
        if self.rank == 0:
            files[ckpt.MODEL] = ckpt.write_safetensors(state)
            files[ckpt.EXTRA] = ckpt.write_torch(dict(extra or {}))
        meta = {"step": step, "version": self.version, "world_size": self.world_size,
                "backend": self.cfg.backend, "format": 1}
        return ckpt.save(root, step, self.rank, files, meta, self.cfg.keep_checkpoints)

    def load_checkpoint(self, path: str) -> dict:
        """Restore from a checkpoint directory, or the latest under a checkpoints root.
        Returns {"step", "version", "extra", "path"}."""
        self._ensure_built()
        path = ckpt.resolve(path)
        meta = ckpt.read_meta(path)
        if meta["backend"] != self.cfg.backend:
            raise ValueError(f"checkpoint {path} was written by backend {meta['backend']!r}, "
                             f"this run uses {self.cfg.backend!r}")
        self.backend.load_hf_state_dict(ckpt.read_safetensors(os.path.join(path, ckpt.MODEL)))
        own = os.path.join(path, ckpt.rank_file("optimizer", self.rank))
        if optimizer_is_sharded(self.backend) and meta["world_size"] != self.world_size:
            raise ValueError(f"checkpoint {path} holds optimizer shards of {meta['world_size']} ranks; "
                             f"this run has {self.world_size}")
        if not os.path.exists(own):  # replicated optimizer: rank 0's state is everyone's
            own = os.path.join(path, ckpt.rank_file("optimizer", 0))
        self.optimizer.load_state_dict(ckpt.read_torch(own))
        rng = os.path.join(path, ckpt.rank_file("rng", self.rank))
        if os.path.exists(rng):
            ckpt.set_rng_state(ckpt.read_torch(rng))
        self.version = int(meta["version"])
        return {"step": int(meta["step"]), "version": self.version,
                "extra": ckpt.read_torch(os.path.join(path, ckpt.EXTRA)), "path": path}

    def close(self) -> None:
        for backend in (self.reference, self.backend):
            if backend is not None:
                backend.close()
        self.backend = self.reference = self.optimizer = None
        if self._weight_group is not None:
            dist.destroy_process_group(self._weight_group)
            self._weight_group = None
        if dist.is_initialized():
            dist.destroy_process_group()


def _all_reduce_flat(grads: list[torch.Tensor], group: dist.ProcessGroup) -> None:
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset: offset + n].view_as(g))
        offset += n


def minibatch_split(items: list, count: int) -> list[list]:
    """`count` minibatches by position (item i goes to minibatch i % count): every shard splits
    its share by this rule, so the driver can count each minibatch's global tokens the same way."""
    if count < 1:
        raise ValueError(f"trainer.minibatches is {count}; it must be at least 1")
    return [items[j::count] for j in range(count)]


def minibatch_totals(samples: list[TrainSample], dp_size: int, count: int) -> tuple[list[int], list[int]]:
    """(loss tokens, samples) of each minibatch over all data-parallel shares (share r is
    samples[r::dp_size]): the denominators `train_step` needs."""
    tokens, rows = [0] * count, [0] * count
    for rank in range(dp_size):
        for j, part in enumerate(minibatch_split(samples[rank::dp_size], count)):
            tokens[j] += sum(sum(s.loss_mask[1:]) for s in part)
            rows[j] += len(part)
    return tokens, rows


def _per_minibatch(value, count: int, name: str) -> list[int]:
    values = [int(value)] if isinstance(value, int) else [int(v) for v in value]
    if len(values) != count:
        raise ValueError(f"{name} has {len(values)} entries; trainer.minibatches is {count}")
    return values


def _behavior_gap(parts: list, version: int) -> dict:
    """How far the trainer's view of the sampled tokens is from the engine's, before any update.

    Sums and counts (the driver adds them over shards): |proximal - behavior| over tokens the
    engine sampled at the trainer's current version (same weights: any gap is numerics, a
    temperature mismatch or a weight-sync bug), and the k3 estimate of KL(behavior || proximal)
    over every generated token (includes the staleness of older tokens)."""
    out = {"mismatch_abs_sum": 0.0, "mismatch_kl_sum": 0.0, "mismatch_tokens": 0,
           "behavior_kl_sum": 0.0, "behavior_tokens": 0}
    for batch, proximal, _ in parts:
        mask = batch["loss_mask"].to(proximal.device) > 0
        log_ratio = proximal - batch["behavior_logprobs"].to(proximal.device)
        k3 = torch.exp(log_ratio) - 1.0 - log_ratio
        same = mask & (batch["versions"].to(proximal.device) == version)
        out["mismatch_abs_sum"] += float(log_ratio.abs()[same].sum())
        out["mismatch_kl_sum"] += float(k3[same].sum())
        out["mismatch_tokens"] += int(same.sum())
        out["behavior_kl_sum"] += float(k3[mask].sum())
        out["behavior_tokens"] += int(mask.sum())
    return out


def _combine_steps(steps: list[dict]) -> dict:
    """One update's statistics from its optimizer steps: means, and the maxima that matter."""
    if not steps:
        return {"loss": 0.0, "grad_norm": 0.0}
    out = {"loss": sum(s["loss"] for s in steps) / len(steps),
           "grad_norm": sum(s["grad_norm"] for s in steps) / len(steps),
           "grad_norm_max": max(s["grad_norm"] for s in steps)}
    measured = [s for s in steps if "ratio_mean" in s]
    for key in ("clip_fraction", "ratio_mean", "tis_mean", "kl"):
        if measured:
            out[key] = sum(s[key] for s in measured) / len(measured)
    if measured:
        out["ratio_max"] = max(s["ratio_max"] for s in measured)
    return out
