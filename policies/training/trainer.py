"""One rank's trainer step: padding, GRPO loss, gradient all-reduce, clipping, lr warm-up, the
PPO epochs x minibatches loop, the policy version, and checkpoints of all of it.

    trainer = Trainer(cfg, model_path, rank, world_size, seed)   # builds backend + optimizer
    stats = trainer.train_step(samples, temperature, global_loss_tokens, global_samples)
    trainer.save_checkpoint(root, step, extra) / trainer.load_checkpoint(path)
    trainer.close()

No Ray here: actors/training/trainer_shard.py is the role around it (rendezvous, weight export). When
world_size > 1 (or the backend is megatron) torch.distributed must be initialised first.

Data parallel: every rank trains on its share of a batch (share r of the data-parallel group is
samples[r::dp_size]); each rank's loss is divided by the global token (or trajectory) count of
its minibatch, so summing gradients over the group gives the whole minibatch's mean.
"""
from __future__ import annotations

import os
import time
from typing import Optional, Sequence, Union

import torch
import torch.distributed as dist

from configs.schema import TrainerConfig
from policies.training import checkpoint as ckpt
from policies.training.losses import grpo_loss
from policies.sample_types import TrainSample
from policies.training.trainer_backend import backend_class, clip_grad_norm, optimizer_is_sharded, trainable

# 2: meta.json carries a manifest of every file's size and sha256 (1: none; still loads, unverified).
CHECKPOINT_FORMAT = 2


def pad_samples(samples: list[TrainSample]) -> dict[str, torch.Tensor]:
    """Right-padded [B, T] tensors of a batch (advantages: [B])."""
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


class Trainer:
    """The model (a trainer backend), its optimizer, the frozen reference when trainer.kl_coef
    > 0, and the policy version: the number of updates made, saved with every checkpoint."""

    def __init__(self, cfg: TrainerConfig, model_path: str, rank: int = 0, world_size: int = 1, seed: int = 0):
        self.cfg, self.model_path, self.rank, self.world_size = cfg, model_path, rank, world_size
        backend_cls = backend_class(cfg.backend)
        ckpt.seed_everything(seed + rank)  # each rank its own stream; a resume restores them
        self.backend = backend_cls(cfg, model_path, rank, world_size)
        self.optimizer = torch.optim.AdamW(
            trainable(self.backend.parameters()), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=tuple(cfg.betas),
        )
        self.reference = None
        if cfg.kl_coef > 0:
            # The reference is the initial policy: the checkpoint this run started from (also
            # after a resume), held frozen beside the trained copy.
            self.reference = backend_cls(cfg, model_path, rank, world_size)
            for p in self.reference.parameters():
                p.requires_grad_(False)
        # The data-parallel layout is fixed once the backend has made its groups: gradients are
        # summed over dp_group, and the driver splits batches by (dp_rank, dp_size); TP peers
        # share a dp_rank and get the same samples.
        self.dp_group: Optional[dist.ProcessGroup] = self.backend.data_parallel_group()
        self.dp_rank, self.dp_size = ((0, 1) if self.dp_group is None
                                      else (dist.get_rank(self.dp_group), dist.get_world_size(self.dp_group)))
        self.version = 0

    # -- one update ------------------------------------------------------------------------
    def train_step(self, samples: list[TrainSample], temperature: float,
                   global_loss_tokens: Union[int, Sequence[int]],
                   global_samples: Union[int, Sequence[int], None] = None) -> dict:
        """One update (policy version + 1) from this rank's share of a batch: `trainer.ppo_epochs`
        passes over it, each in `trainer.minibatches` optimizer steps (`minibatch_split`), all
        clipped against the proximal log-probs of the weights before the first step.

        The global counts (over every data-parallel share) are each minibatch's loss denominators
        (trainer.loss_aggregation), so shares' gradients sum to the whole minibatch's: one int per
        minibatch (a list), or one int when there is one minibatch. Default samples: this share's."""
        started = time.perf_counter()
        count = self.cfg.minibatches
        tokens = _per_minibatch(global_loss_tokens, count, "global_loss_tokens")
        rows = _per_minibatch(global_samples if global_samples is not None
                              else [len(m) for m in minibatch_split(samples, count)], count, "global_samples")
        stats: dict = {"samples": len(samples)}
        t0 = time.perf_counter()
        # [padded minibatch, proximal log-probs, reference log-probs] per minibatch. The first
        # minibatch's proximal log-probs are its first optimizer step's own forward (the weights
        # have not moved yet), detached: one forward of 1/minibatches of the batch saved.
        parts: list = []
        with torch.no_grad():
            for index, part in enumerate(minibatch_split(samples, count)):
                if not part:
                    parts.append(None)
                    continue
                batch = pad_samples(part)
                ids, attn = batch["token_ids"], batch["attention_mask"]
                proximal = self.backend.sequence_logprobs(ids, attn, temperature) if index else None
                ref = self.reference.sequence_logprobs(ids, attn, temperature) if self.reference else None
                parts.append([batch, proximal, ref])
        stats["time_logprob_s"] = time.perf_counter() - t0
        self._set_lr()
        steps: list[dict] = []
        for _ in range(self.cfg.ppo_epochs):
            for index, part in enumerate(parts):
                steps.append(self._optimizer_step(part, temperature, max(tokens[index], 1), max(rows[index], 1)))
        stats.update(_behavior_gap([p for p in parts if p is not None], self.version))
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
        """Forward, loss, backward on one minibatch (None: this rank holds none of it, and still
        joins the gradient all-reduce), then clip and step."""
        self.optimizer.zero_grad(set_to_none=False)
        stats: dict = {"loss": 0.0}
        if part is not None:
            batch, proximal, ref = part
            logprobs = self.backend.sequence_logprobs(batch["token_ids"], batch["attention_mask"], temperature)
            if proximal is None:  # the weights are still those the batch is clipped against
                proximal = part[1] = logprobs.detach()
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
        if self.dp_size == 1:
            return
        limit_bytes = max(1, self.cfg.grad_bucket_mb) << 20
        bucket: list[torch.Tensor] = []
        size_bytes = 0
        for p in params:
            bucket.append(p.grad)
            size_bytes += p.grad.numel() * p.grad.element_size()
            if size_bytes >= limit_bytes:
                _all_reduce_flat(bucket, self.dp_group)
                bucket, size_bytes = [], 0
        if bucket:
            _all_reduce_flat(bucket, self.dp_group)

    # -- checkpoints -----------------------------------------------------------------------
    def save_checkpoint(self, root: str, step: int, extra: Optional[dict] = None) -> str:
        """Collective: every rank calls it. Rank 0 writes the full HF weights, `extra` and the
        metadata; the optimizer state is written by rank 0 alone when it is replicated (torch
        backend) and by every rank when sharded (megatron TP/EP: its own shard's state); every
        rank writes its RNG states; meta.json lists every file's sha256 (policies.training.checkpoint).
        Keeps the last trainer.keep_checkpoints."""
        state = self.backend.hf_state_dict()
        files = {ckpt.rank_file("rng", self.rank): ckpt.write_torch(ckpt.rng_state())}
        if self.rank == 0 or optimizer_is_sharded(self.backend):
            files[ckpt.rank_file("optimizer", self.rank)] = ckpt.write_torch(self.optimizer.state_dict())
        if self.rank == 0:
            files[ckpt.MODEL] = ckpt.write_model(state)
            files[ckpt.EXTRA] = ckpt.write_torch(dict(extra or {}))
        meta = {"step": step, "version": self.version, "world_size": self.world_size,
                "backend": self.cfg.backend, "format": CHECKPOINT_FORMAT}
        return ckpt.save(root, step, self.rank, files, meta, self.cfg.keep_checkpoints)

    def load_checkpoint(self, path: str) -> dict:
        """Restore weights, optimizer, RNG states and the version from a checkpoint directory (it
        must pass its checksums), or the newest valid one under a checkpoints root (newer corrupt
        or half-written ones are skipped with a warning). Returns {"step", "version", "extra", "path"}."""
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
        """Release the backends (megatron: its model-parallel state); process groups are the caller's."""
        for backend in (self.reference, self.backend):
            if backend is not None:
                backend.close()
        self.backend = self.reference = None


def _per_minibatch(value: Union[int, Sequence[int]], count: int, name: str) -> list[int]:
    values = [int(value)] if isinstance(value, int) else [int(v) for v in value]
    if len(values) != count:
        raise ValueError(f"{name} has {len(values)} entries; trainer.minibatches is {count}")
    return values


def _all_reduce_flat(grads: list[torch.Tensor], group: Optional[dist.ProcessGroup]) -> None:
    """One all-reduce for a bucket of gradients: flattened, summed, copied back."""
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset: offset + n].view_as(g))
        offset += n


def _behavior_gap(parts: list, version: int) -> dict:
    """How far the trainer's view of the sampled tokens is from the engine's, before any update.

    Sums and counts (the driver adds them over shards; metrics `logprob_mismatch_mean`,
    `mismatch_kl`, `behavior_kl`): |proximal - behavior| over tokens the engine sampled at the
    trainer's current version (same weights: any gap is numerics, a temperature mismatch or a
    weight-sync bug), and over every token trained (loss mask 1, so tokens masked as stale under
    rollout.staleness_unit=token are not in it) the k3 estimate of KL(behavior || proximal):
    exp(d) - 1 - d with d = proximal - behavior, unbiased for tokens drawn from the behaviour
    policy and never negative. It includes the staleness of tokens from older versions."""
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
