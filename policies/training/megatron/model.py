"""Build a megatron-core GPTModel equivalent to a Hugging Face Qwen3 / Qwen3-MoE checkpoint.

Only megatron-core's own ("local") modules are used, so no transformer_engine or apex is
needed; the same model runs on CPU (with `cpu_shim`) and on GPU. `parallel_state` must
already be initialised with the tensor / expert parallel sizes the layout names.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from policies.training.megatron.convert import Layout, layout_from_hf_config

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class MegatronOptions:
    """Megatron-only trainer settings (to move into `configs.schema.TrainerConfig`)."""

    tensor_parallel_size: int = 1
    expert_parallel_size: int = 1
    # Parameter and compute dtype: "float32" | "bfloat16" | "float16".
    params_dtype: str = "float32"
    # MoE load-balancing auxiliary loss coefficient; 0 leaves the router untouched (the
    # loss then equals the HF model's exactly). >0 adds Megatron's "aux_loss" balancing.
    moe_aux_loss_coeff: float = 0.0
    # Pad the vocabulary to a multiple of this times tensor_parallel_size (megatron's
    # make_vocab_size_divisible_by); padded logits are masked out of the log-softmax.
    vocab_multiple: int = 1
    # Recompute each transformer layer in backward (saves activation memory).
    recompute_activations: bool = False

    def validate(self) -> None:
        for key in ("tensor_parallel_size", "expert_parallel_size", "vocab_multiple"):
            if getattr(self, key) < 1:
                raise ValueError(f"trainer.{key}: must be >= 1, got {getattr(self, key)}")
        if self.params_dtype not in _DTYPES:
            raise ValueError(
                f"trainer.params_dtype: got {self.params_dtype!r}, allowed {sorted(_DTYPES)}")
        if self.moe_aux_loss_coeff < 0:
            raise ValueError(f"trainer.moe_aux_loss_coeff: must be >= 0, got {self.moe_aux_loss_coeff}")

    @classmethod
    def from_trainer_config(cls, cfg: Any) -> "MegatronOptions":
        """Read the megatron fields from `configs.schema.TrainerConfig`."""
        missing = [key for key in cls.__dataclass_fields__ if not hasattr(cfg, key)]
        if missing:
            raise ValueError(
                f"trainer config lacks the megatron backend's fields {missing}; add them to "
                "configs.schema.TrainerConfig or pass options=MegatronOptions(...)")
        options = cls(**{key: getattr(cfg, key) for key in cls.__dataclass_fields__})
        options.validate()
        return options


def load_hf_config(model_path: str):
    from transformers import AutoConfig

    if not os.path.isfile(os.path.join(model_path, "config.json")):
        raise FileNotFoundError(f"no config.json in model directory {model_path!r}")
    return AutoConfig.from_pretrained(model_path)


def rope_theta(hf_config) -> float:
    params = getattr(hf_config, "rope_parameters", None) or {}
    scaling = getattr(hf_config, "rope_scaling", None) or {}
    rope_type = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if rope_type != "default":
        raise ValueError(f"rope type {rope_type!r} is not supported by the megatron backend")
    theta = params.get("rope_theta", getattr(hf_config, "rope_theta", None))
    if theta is None:
        raise ValueError("HF config has no rope_theta")
    return float(theta)


def check_supported(hf_config) -> None:
    model_type = getattr(hf_config, "model_type", "")
    if model_type not in ("qwen3", "qwen3_moe"):
        raise ValueError(f"megatron backend supports qwen3 and qwen3_moe, not {model_type!r}")
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act {hf_config.hidden_act!r} unsupported (SwiGLU needs silu)")
    if getattr(hf_config, "attention_bias", False):
        raise ValueError("attention_bias=True is not supported")
    if getattr(hf_config, "use_sliding_window", False):
        raise ValueError("sliding-window attention is not supported")


def make_layout(hf_config, options: MegatronOptions) -> Layout:
    from megatron.core import parallel_state as ps

    layout = layout_from_hf_config(
        hf_config, tp_size=options.tensor_parallel_size, ep_size=options.expert_parallel_size,
        etp_size=ps.get_expert_tensor_parallel_world_size(), vocab_multiple=options.vocab_multiple,
    )
    return layout.with_ranks(
        tp_rank=ps.get_tensor_model_parallel_rank(),
        ep_rank=ps.get_expert_model_parallel_rank(),
        etp_rank=ps.get_expert_tensor_parallel_rank(),
    )


def transformer_config(hf_config, layout: Layout, options: MegatronOptions):
    from megatron.core.transformer.transformer_config import TransformerConfig

    dtype = _DTYPES[options.params_dtype]
    kwargs = dict(
        num_layers=layout.num_layers,
        hidden_size=layout.hidden_size,
        num_attention_heads=layout.num_heads,
        num_query_groups=layout.num_kv_heads,
        kv_channels=layout.head_dim,
        ffn_hidden_size=hf_config.intermediate_size,
        normalization="RMSNorm",
        layernorm_epsilon=hf_config.rms_norm_eps,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=False,
        qk_layernorm=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        use_cpu_initialization=True,
        params_dtype=dtype,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        tensor_model_parallel_size=layout.tp_size,
        expert_model_parallel_size=layout.ep_size,
        expert_tensor_parallel_size=layout.etp_size,
        sequence_parallel=False,
        # Fused kernels are CUDA/apex/TE-only; the plain torch paths match HF numerically.
        bias_activation_fusion=False,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        bias_dropout_fusion=False,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
    )
    if options.recompute_activations:
        if not torch.cuda.is_available():
            # megatron's CheckpointFunction saves and restores CUDA RNG states.
            raise ValueError("trainer.recompute_activations needs CUDA (megatron-core's "
                             "activation checkpointing saves CUDA RNG states)")
        kwargs.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    if layout.is_moe:
        aux = options.moe_aux_loss_coeff
        kwargs.update(
            num_moe_experts=layout.num_experts,
            moe_router_topk=hf_config.num_experts_per_tok,
            moe_ffn_hidden_size=hf_config.moe_intermediate_size,
            # HF: softmax over all experts, top-k, renormalise iff norm_topk_prob. Megatron
            # without pre-softmax takes top-k logits then softmaxes them, which equals the
            # renormalised case; with pre-softmax it keeps the raw top-k probabilities.
            moe_router_pre_softmax=not getattr(hf_config, "norm_topk_prob", False),
            moe_token_dispatcher_type="allgather",
            moe_grouped_gemm=False,
            moe_router_load_balancing_type="aux_loss" if aux > 0 else "none",
            moe_aux_loss_coeff=aux,
            moe_layer_freq=[1 if moe else 0 for moe in layout.moe_layers],
        )
    return TransformerConfig(**kwargs)


def build_gpt_model(hf_config, layout: Layout, options: MegatronOptions):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec

    check_supported(hf_config)
    config = transformer_config(hf_config, layout, options)
    spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization="RMSNorm")
    return GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=layout.padded_vocab_size,
        max_sequence_length=hf_config.max_position_embeddings,
        pre_process=True,
        post_process=True,
        # Logits stay vocab-sharded; the log-probs use megatron's vocab-parallel cross entropy.
        parallel_output=True,
        share_embeddings_and_output_weights=layout.tied,
        position_embedding_type="rope",
        rotary_percent=1.0,
        rotary_base=rope_theta(hf_config),
    )


def read_hf_weights(model_path: str) -> dict[str, torch.Tensor]:
    """All tensors of a safetensors checkpoint directory (single file or sharded index)."""
    from safetensors.torch import load_file

    index = os.path.join(model_path, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as handle:
            files = sorted(set(json.load(handle)["weight_map"].values()))
    elif os.path.isfile(os.path.join(model_path, "model.safetensors")):
        files = ["model.safetensors"]
    else:
        raise FileNotFoundError(f"no safetensors weights in {model_path!r}")
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(load_file(os.path.join(model_path, name)))
    return state
