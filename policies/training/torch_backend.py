"""Trainer backend `torch`: the Hugging Face model itself, data parallel by summed gradients.

Every rank holds the full model. The shard sums gradients over `data_parallel_group()` with
one bucketed all-reduce after backward (each rank's loss is already divided by the global
token count, so the sum is the token-level mean over the whole batch).

Why no DDP / FSDP wrapper: DDP's only gain is overlapping the all-reduce with backward, which
matters for large models on GPUs; here it would cost correctness details instead: DDP averages
(we need a sum), and it requires every rank to run a forward/backward, while a shard whose part
of the batch is empty must still step (it only joins the all-reduce). FSDP saves memory for
models that do not fit one device; those run on the `megatron` backend (TP/EP), which is where
sharding belongs. So this backend stays the plain, exact path for small models and tests.
"""
from __future__ import annotations

from typing import Iterable, Optional

import torch
import torch.distributed as dist

from configs.schema import TrainerConfig
from policies.device import role_device
from policies.training.logprobs import sequence_logprobs
from policies.training.precision import autocast, use_bf16
from policies.model import load_model

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class TorchBackend:
    optimizer_is_sharded = False

    def __init__(self, cfg: TrainerConfig, model_path: str, rank: int, world_size: int):
        self.cfg, self.rank, self.world_size = cfg, rank, world_size
        self.model = load_model(model_path, dtype=_DTYPES[cfg.params_dtype])
        self.model.to(role_device())
        self.model.train()
        self.bf16_autocast = use_bf16(cfg.mixed_precision, self.device)
        self._group = dist.group.WORLD if world_size > 1 else None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def parameters(self) -> Iterable[torch.nn.Parameter]:
        return self.model.parameters()

    def sequence_logprobs(self, token_ids: torch.Tensor, attention_mask: torch.Tensor,
                          temperature: float) -> torch.Tensor:
        with autocast(self.bf16_autocast, self.device):
            return sequence_logprobs(self.model, token_ids.to(self.device), attention_mask.to(self.device),
                                     temperature)

    def data_parallel_group(self) -> Optional[dist.ProcessGroup]:
        return self._group

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        # Clones, so tied weights become separate tensors (safetensors refuses shared storage).
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def load_hf_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        tied = {"lm_head.weight"} if getattr(self.model.config, "tie_word_embeddings", False) else set()
        missing = [k for k in missing if k not in tied]
        if missing or unexpected:
            raise KeyError(f"HF state dict does not match the model: missing {missing[:5]}, "
                           f"unexpected {list(unexpected)[:5]}")

    def close(self) -> None:
        self.model = None
