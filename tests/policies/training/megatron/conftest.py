"""Fixtures for the megatron backend tests: tiny HF Qwen3 / Qwen3-MoE checkpoints, gloo."""
from __future__ import annotations

import os

import pytest
import torch
from policies.engines.process import free_port


def build_checkpoint(out_dir: str, moe: bool = False, seed: int = 0, **overrides) -> str:
    """Save a tiny random Qwen3 (or Qwen3-MoE) checkpoint with non-trivial norms and router."""
    from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    fields = dict(
        vocab_size=101, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, intermediate_size=96, max_position_embeddings=128,
        tie_word_embeddings=True, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
    )
    if moe:
        fields.update(moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                      norm_topk_prob=True)
    fields.update(overrides)
    torch.manual_seed(seed)
    if moe:
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**fields))
    else:
        model = Qwen3ForCausalLM(Qwen3Config(**fields))
    with torch.no_grad():
        for name, param in model.named_parameters():
            # Random norms and a peaked router: a swapped q_norm/k_norm, gate/up or a wrong
            # expert order would then change the outputs.
            if "norm" in name:
                param.copy_(1.0 + 0.2 * torch.randn_like(param))
            elif name.endswith("mlp.gate.weight"):
                param.normal_(0.0, 0.5)
    model.save_pretrained(out_dir)
    return out_dir


@pytest.fixture(scope="session")


def make_checkpoint(tmp_path_factory):
    made: dict = {}

    def make(name: str, **kwargs) -> str:
        if name not in made:
            made[name] = build_checkpoint(str(tmp_path_factory.mktemp(name)), **kwargs)
        return made[name]

    return make


@pytest.fixture(scope="module")


def gloo_world1():
    """A world-size-1 gloo process group (the trainer creates it in production)."""
    import torch.distributed as dist

    created = False
    if not dist.is_initialized():
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}",
                                rank=0, world_size=1)
        created = True
    yield
    if created:
        dist.destroy_process_group()
