"""TrainerShard, torch backend: one rank of a gloo (CPU) / NCCL (GPU) data-parallel group.

Rendezvous the way Ray Train does it: rank 0 picks the address and port, every rank gets
RANK / WORLD_SIZE / LOCAL_RANK and joins. Gradients are summed over ranks with one
all-reduce; each rank's loss is already divided by the global token count, so the sum is
the token-level mean over the whole batch.
"""
from __future__ import annotations

import os
import socket
import time

import torch
import torch.distributed as dist

from actors.trajectory import TrainSample
from configs.schema import TrainerConfig
from policies.logprobs import sequence_logprobs
from policies.losses import grpo_loss
from policies.model import load_model


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def pad_samples(samples: list[TrainSample]) -> dict[str, torch.Tensor]:
    length = max(len(s.token_ids) for s in samples)

    def padded(rows, fill, dtype):
        return torch.tensor([list(r) + [fill] * (length - len(r)) for r in rows], dtype=dtype)

    return {
        "token_ids": padded([s.token_ids for s in samples], 0, torch.long),
        "attention_mask": padded([[1] * len(s.token_ids) for s in samples], 0, torch.long),
        "loss_mask": padded([s.loss_mask for s in samples], 0, torch.float32),
        "behavior_logprobs": padded([s.behavior_logprobs for s in samples], 0.0, torch.float32),
        "advantages": torch.tensor([s.advantage for s in samples], dtype=torch.float32),
    }


class TrainerShard:
    def __init__(self, rank: int, world_size: int, cfg: TrainerConfig, model_path: str, seed: int):
        torch.set_num_threads(cfg.torch_threads)
        torch.manual_seed(seed + rank)
        self.rank, self.world_size, self.cfg = rank, world_size, cfg
        self.model = load_model(model_path)
        self.model.train()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=tuple(cfg.betas)
        )
        self.version = 0

    def rendezvous_address(self) -> tuple[str, int]:
        """Called on rank 0 only."""
        return self.cfg.master_addr, self.cfg.master_port or free_port(self.cfg.master_addr)

    def join(self, master_addr: str, master_port: int) -> None:
        os.environ.update(
            MASTER_ADDR=master_addr, MASTER_PORT=str(master_port), RANK=str(self.rank),
            WORLD_SIZE=str(self.world_size), LOCAL_RANK="0",
        )
        if master_addr.startswith("127."):
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, rank=self.rank, world_size=self.world_size)

    def train_step(self, samples: list[TrainSample], temperature: float, global_loss_tokens: int) -> dict:
        started = time.perf_counter()
        stats: dict = {"samples": len(samples)}
        self.optimizer.zero_grad(set_to_none=False)
        if samples:
            batch = pad_samples(samples)
            t0 = time.perf_counter()
            with torch.no_grad():
                proximal = sequence_logprobs(self.model, batch["token_ids"], batch["attention_mask"], temperature)
            stats["time_logprob_s"] = time.perf_counter() - t0
            logprobs = sequence_logprobs(self.model, batch["token_ids"], batch["attention_mask"], temperature)
            loss, loss_stats = grpo_loss(
                logprobs, proximal, batch["advantages"], batch["loss_mask"],
                clip_eps_low=self.cfg.clip_eps_low, clip_eps_high=self.cfg.clip_eps_high,
                behavior_logprobs=batch["behavior_logprobs"], num_tokens=max(global_loss_tokens, 1),
            )
            loss.backward()
            stats.update(loss=loss.item(), **{k: float(v) for k, v in loss_stats.items()})
        else:
            stats.update(time_logprob_s=0.0, loss=0.0)
        self._all_reduce_grads()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        self.version += 1
        stats.update(grad_norm=float(grad_norm), version=self.version,
                     time_actor_update_s=time.perf_counter() - started)
        return stats

    def _all_reduce_grads(self) -> None:
        params = [p for p in self.model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if self.world_size == 1:
            return
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[offset: offset + n].view_as(p.grad))
            offset += n

    def state_dict(self) -> dict:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
