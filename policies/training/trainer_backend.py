"""What a trainer backend is, and which ones exist.

A backend owns the model of one trainer rank: it computes differentiable per-token log-probs,
exposes its parameters (the shard's optimizer steps them) and converts weights to and from
Hugging Face names (engines, checkpoints and exports all speak HF). The shard owns the rest:
loss, gradient all-reduce over `data_parallel_group()`, clipping, optimizer, version,
checkpoints.

    __init__(cfg: TrainerConfig, model_path: str, rank: int, world_size: int)
        torch.distributed is already initialised when world_size > 1
    parameters() -> Iterable[Parameter]           the parameters this rank optimises
    sequence_logprobs(token_ids, attention_mask, temperature) -> Tensor[B, T]   differentiable
    data_parallel_group() -> ProcessGroup | None   gradients are summed over it (None: no DP)
    hf_state_dict() -> dict[str, Tensor]           HF names, full (unsharded) tensors, on CPU;
                                                   collective where the model is sharded
    load_hf_state_dict(state) -> None              the inverse (every rank gets the full dict)
    close() -> None

Optional, with the shard's defaults used when a backend lacks them:
    all_reduce_grads() -> None            sum gradients over the data-parallel replicas (a MoE
                                          backend reduces expert grads over its expert-DP group);
                                          default: bucketed sum over data_parallel_group()
    clip_grad_norm_(max_norm) -> norm     the global norm (a TP/EP-sharded backend reduces the
                                          squared norm over its model-parallel groups); default:
                                          torch.nn.utils.clip_grad_norm_ over parameters()
    optimizer_is_sharded: bool            False when every rank's optimizer state is the same
                                          (pure data parallel): then rank 0 alone checkpoints
                                          it. Default True (TP/EP shards): every rank writes its own.
"""
from __future__ import annotations

from typing import Iterable

import torch

from configs.schema import TrainerBackend
from policies.training.megatron.backend import MegatronBackend
from policies.training.sim_backend import SimBackend
from policies.training.torch_backend import TorchBackend

# trainer.backend -> class: adding a backend is its name in configs.schema.TrainerBackend and its
# class here (tests/policies/training/test_torch_backend.py checks the two agree). No lazy imports: the
# megatron backend imports megatron-core inside its constructor, so importing the class costs
# only what torch already costs, and a CPU install without megatron-core still imports this.
BACKENDS: dict[TrainerBackend, type] = {"torch": TorchBackend, "megatron": MegatronBackend, "sim": SimBackend}


def backend_class(name: str) -> type:
    if name not in BACKENDS:
        raise ValueError(f"trainer.backend is '{name}'; allowed: {', '.join(BACKENDS)}")
    return BACKENDS[name]


def clip_grad_norm(backend, max_norm: float) -> float:
    own = getattr(backend, "clip_grad_norm_", None)
    if own is not None:
        return float(own(max_norm))
    params = [p for p in backend.parameters() if p.grad is not None]
    return float(torch.nn.utils.clip_grad_norm_(params, max_norm))


def optimizer_is_sharded(backend) -> bool:
    return bool(getattr(backend, "optimizer_is_sharded", True))


def trainable(params: Iterable[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    return [p for p in params if p.requires_grad]
