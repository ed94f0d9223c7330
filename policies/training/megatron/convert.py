"""Hugging Face <-> megatron-core weight conversion for Qwen3 (dense) and Qwen3-MoE.

Three forms of a state dict meet here:

- **HF**: the checkpoint names on disk (`model.layers.{i}.self_attn.q_proj.weight`, per-expert
  `model.layers.{i}.mlp.experts.{e}.gate_proj.weight`, no `lm_head.weight` when the
  embeddings are tied). `from_hf` also accepts the in-memory transformers-5 MoE layout
  (`mlp.experts.gate_up_proj` [E, 2I, H], `mlp.experts.down_proj` [E, H, I]) and a tied
  `lm_head.weight` (ignored).
- **full megatron**: megatron-core GPTModel names at tensor/expert parallel size 1, with
  experts numbered globally (`decoder.layers.{i}.mlp.experts.local_experts.{e}`) and the
  vocabulary padded to `Layout.padded_vocab_size`.
- **local megatron**: what one rank's GPTModel holds: tensor-parallel shards and only that
  rank's experts, numbered locally.

Megatron layouts used (megatron-core 0.16, local spec):
- `self_attention.linear_qkv.weight`: per query group g, rows [q heads of g | k_g | v_g],
  groups stacked; column parallel, so a TP rank holds num_query_groups / TP whole groups.
- `self_attention.linear_proj.weight` (o_proj): row parallel, split along dim 1.
- `self_attention.{q,k}_layernorm.weight`: Qwen3's q_norm / k_norm, per head, replicated.
- `mlp.linear_fc1.weight`: [gate; up] (SwiGLU); column parallel, and each TP rank holds
  [gate shard; up shard] (not a plain slice of the fused matrix).
- `mlp.linear_fc2.weight` (down_proj): row parallel, split along dim 1.
- `mlp.router.weight`: replicated. Experts: the same fc1/fc2 rules with the expert-TP size.
- `embedding.word_embeddings.weight` / `output_layer.weight`: vocab parallel, dim 0.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Dict, Mapping, Optional, Sequence, Tuple

import torch

StateDict = Dict[str, torch.Tensor]

_EXPERT_RE = re.compile(r"^(decoder\.layers\.\d+\.mlp\.experts\.local_experts\.)(\d+)(\..*)$")


@dataclass(frozen=True)
class Layout:
    """Shapes and parallel placement of one model on one rank."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    padded_vocab_size: int
    tied: bool
    # moe_layers[i] is True when layer i has experts (Qwen3-MoE `mlp_only_layers`,
    # `decoder_sparse_step`); all False for a dense model.
    moe_layers: Tuple[bool, ...] = ()
    num_experts: int = 0
    tp_size: int = 1
    tp_rank: int = 0
    ep_size: int = 1
    ep_rank: int = 0
    etp_size: int = 1
    etp_rank: int = 0

    @property
    def is_moe(self) -> bool:
        return any(self.moe_layers)

    @property
    def num_local_experts(self) -> int:
        return self.num_experts // self.ep_size

    def with_ranks(self, tp_rank: int = 0, ep_rank: int = 0, etp_rank: int = 0) -> "Layout":
        return replace(self, tp_rank=tp_rank, ep_rank=ep_rank, etp_rank=etp_rank)

    def validate(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.num_kv_heads % self.tp_size:
            raise ValueError(
                f"tensor_parallel_size {self.tp_size} must divide num_key_value_heads {self.num_kv_heads}")
        if self.padded_vocab_size % self.tp_size or self.padded_vocab_size < self.vocab_size:
            raise ValueError(f"padded vocab {self.padded_vocab_size} invalid for TP {self.tp_size}")
        if self.is_moe and self.num_experts % self.ep_size:
            raise ValueError(
                f"expert_parallel_size {self.ep_size} must divide num_experts {self.num_experts}")


def pad_vocab(vocab_size: int, multiple: int) -> int:
    return -(-vocab_size // multiple) * multiple


def layout_from_hf_config(
    config, tp_size: int = 1, ep_size: int = 1, etp_size: Optional[int] = None,
    vocab_multiple: int = 1,
) -> Layout:
    """Layout of a transformers Qwen3Config / Qwen3MoeConfig (rank 0 of every group)."""
    num_layers = config.num_hidden_layers
    num_experts = int(getattr(config, "num_experts", 0) or 0)
    if num_experts:
        mlp_only = set(getattr(config, "mlp_only_layers", None) or [])
        step = int(getattr(config, "decoder_sparse_step", 1) or 1)
        moe_layers = tuple(
            (i not in mlp_only) and (i + 1) % step == 0 for i in range(num_layers))
    else:
        moe_layers = (False,) * num_layers
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    layout = Layout(
        num_layers=num_layers,
        hidden_size=config.hidden_size,
        num_heads=config.num_attention_heads,
        num_kv_heads=config.num_key_value_heads,
        head_dim=head_dim,
        vocab_size=config.vocab_size,
        padded_vocab_size=pad_vocab(config.vocab_size, vocab_multiple * tp_size),
        tied=bool(getattr(config, "tie_word_embeddings", False)),
        moe_layers=moe_layers,
        num_experts=num_experts,
        tp_size=tp_size,
        ep_size=ep_size,
        etp_size=tp_size if etp_size is None else etp_size,
    )
    layout.validate()
    return layout


# ---------------------------------------------------------------- HF <-> full megatron


def _hf_layer(i: int) -> str:
    return f"model.layers.{i}."


def _mg_layer(i: int) -> str:
    return f"decoder.layers.{i}."


def _pad_rows(weight: torch.Tensor, rows: int) -> torch.Tensor:
    if weight.shape[0] == rows:
        return weight
    pad = weight.new_zeros((rows - weight.shape[0],) + tuple(weight.shape[1:]))
    return torch.cat([weight, pad], dim=0)


def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: Layout) -> torch.Tensor:
    groups, hd = layout.num_kv_heads, layout.head_dim
    per_group = layout.num_heads // groups
    hidden = q.shape[1]
    fused = torch.cat(
        [q.reshape(groups, per_group * hd, hidden), k.reshape(groups, hd, hidden),
         v.reshape(groups, hd, hidden)], dim=1)
    return fused.reshape(groups * (per_group + 2) * hd, hidden)


def split_qkv(qkv: torch.Tensor, layout: Layout) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    groups, hd = layout.num_kv_heads, layout.head_dim
    per_group = layout.num_heads // groups
    hidden = qkv.shape[1]
    grouped = qkv.reshape(groups, (per_group + 2) * hd, hidden)
    q, k, v = torch.split(grouped, [per_group * hd, hd, hd], dim=1)
    return (q.reshape(-1, hidden).contiguous(), k.reshape(-1, hidden).contiguous(),
            v.reshape(-1, hidden).contiguous())


def _hf_experts(hf: Mapping[str, torch.Tensor], prefix: str, num_experts: int):
    """Yield (expert, gate, up, down) from per-expert or fused (transformers-5) names."""
    fused = prefix + "mlp.experts.gate_up_proj"
    if fused in hf:
        gate_up, down = hf[fused], hf[prefix + "mlp.experts.down_proj"]
        for e in range(num_experts):
            gate, up = gate_up[e].chunk(2, dim=0)
            yield e, gate, up, down[e]
        return
    for e in range(num_experts):
        base = f"{prefix}mlp.experts.{e}."
        yield e, hf[base + "gate_proj.weight"], hf[base + "up_proj.weight"], hf[base + "down_proj.weight"]


def from_hf(hf: Mapping[str, torch.Tensor], layout: Layout) -> StateDict:
    """HF state dict -> full megatron state dict (TP=1, all experts, padded vocab)."""
    out: StateDict = {}
    out["embedding.word_embeddings.weight"] = _pad_rows(
        hf["model.embed_tokens.weight"], layout.padded_vocab_size)
    if not layout.tied:
        out["output_layer.weight"] = _pad_rows(hf["lm_head.weight"], layout.padded_vocab_size)
    out["decoder.final_layernorm.weight"] = hf["model.norm.weight"]
    for i in range(layout.num_layers):
        h, m = _hf_layer(i), _mg_layer(i)
        out[m + "input_layernorm.weight"] = hf[h + "input_layernorm.weight"]
        out[m + "self_attention.linear_qkv.weight"] = fuse_qkv(
            hf[h + "self_attn.q_proj.weight"], hf[h + "self_attn.k_proj.weight"],
            hf[h + "self_attn.v_proj.weight"], layout)
        out[m + "self_attention.q_layernorm.weight"] = hf[h + "self_attn.q_norm.weight"]
        out[m + "self_attention.k_layernorm.weight"] = hf[h + "self_attn.k_norm.weight"]
        out[m + "self_attention.linear_proj.weight"] = hf[h + "self_attn.o_proj.weight"]
        out[m + "pre_mlp_layernorm.weight"] = hf[h + "post_attention_layernorm.weight"]
        if layout.moe_layers[i]:
            out[m + "mlp.router.weight"] = hf[h + "mlp.gate.weight"]
            for e, gate, up, down in _hf_experts(hf, h, layout.num_experts):
                base = f"{m}mlp.experts.local_experts.{e}."
                out[base + "linear_fc1.weight"] = torch.cat([gate, up], dim=0)
                out[base + "linear_fc2.weight"] = down
        else:
            out[m + "mlp.linear_fc1.weight"] = torch.cat(
                [hf[h + "mlp.gate_proj.weight"], hf[h + "mlp.up_proj.weight"]], dim=0)
            out[m + "mlp.linear_fc2.weight"] = hf[h + "mlp.down_proj.weight"]
    return {k: v.contiguous() for k, v in out.items()}


def to_hf(full: Mapping[str, torch.Tensor], layout: Layout) -> StateDict:
    """Full megatron state dict -> HF checkpoint names (per-expert, no tied lm_head)."""
    out: StateDict = {}
    out["model.embed_tokens.weight"] = full["embedding.word_embeddings.weight"][: layout.vocab_size]
    if not layout.tied:
        out["lm_head.weight"] = full["output_layer.weight"][: layout.vocab_size]
    out["model.norm.weight"] = full["decoder.final_layernorm.weight"]
    for i in range(layout.num_layers):
        h, m = _hf_layer(i), _mg_layer(i)
        out[h + "input_layernorm.weight"] = full[m + "input_layernorm.weight"]
        q, k, v = split_qkv(full[m + "self_attention.linear_qkv.weight"], layout)
        out[h + "self_attn.q_proj.weight"] = q
        out[h + "self_attn.k_proj.weight"] = k
        out[h + "self_attn.v_proj.weight"] = v
        out[h + "self_attn.q_norm.weight"] = full[m + "self_attention.q_layernorm.weight"]
        out[h + "self_attn.k_norm.weight"] = full[m + "self_attention.k_layernorm.weight"]
        out[h + "self_attn.o_proj.weight"] = full[m + "self_attention.linear_proj.weight"]
        out[h + "post_attention_layernorm.weight"] = full[m + "pre_mlp_layernorm.weight"]
        if layout.moe_layers[i]:
            out[h + "mlp.gate.weight"] = full[m + "mlp.router.weight"]
            for e in range(layout.num_experts):
                base = f"{m}mlp.experts.local_experts.{e}."
                gate, up = full[base + "linear_fc1.weight"].chunk(2, dim=0)
                out[f"{h}mlp.experts.{e}.gate_proj.weight"] = gate
                out[f"{h}mlp.experts.{e}.up_proj.weight"] = up
                out[f"{h}mlp.experts.{e}.down_proj.weight"] = full[base + "linear_fc2.weight"]
        else:
            gate, up = full[m + "mlp.linear_fc1.weight"].chunk(2, dim=0)
            out[h + "mlp.gate_proj.weight"] = gate
            out[h + "mlp.up_proj.weight"] = up
            out[h + "mlp.down_proj.weight"] = full[m + "mlp.linear_fc2.weight"]
    return {k: v.contiguous() for k, v in out.items()}


# ------------------------------------------------------ full megatron <-> local shards

# How a parameter is split across its tensor-parallel group.
REPLICATED, ROWS, COLS, GATED_ROWS = "replicated", "rows", "cols", "gated_rows"


def split_rule(name: str) -> str:
    """The tensor-parallel split of a megatron parameter (dense and expert alike)."""
    if name.endswith(("embedding.word_embeddings.weight", "output_layer.weight",
                      "self_attention.linear_qkv.weight")):
        return ROWS
    if name.endswith(("self_attention.linear_proj.weight", "linear_fc2.weight")):
        return COLS
    if name.endswith("linear_fc1.weight"):
        return GATED_ROWS
    return REPLICATED


def is_expert(name: str) -> bool:
    return _EXPERT_RE.match(name) is not None


def _take(tensor: torch.Tensor, rule: str, size: int, rank: int) -> torch.Tensor:
    if size == 1 or rule == REPLICATED:
        return tensor
    if rule == ROWS:
        return tensor.chunk(size, dim=0)[rank]
    if rule == COLS:
        return tensor.chunk(size, dim=1)[rank]
    gate, up = tensor.chunk(2, dim=0)
    return torch.cat([gate.chunk(size, dim=0)[rank], up.chunk(size, dim=0)[rank]], dim=0)


def merge_shards(shards: Sequence[torch.Tensor], rule: str) -> torch.Tensor:
    """Inverse of the split: the TP group's shards, in rank order -> the full tensor."""
    if len(shards) == 1 or rule == REPLICATED:
        return shards[0]
    if rule == ROWS:
        return torch.cat(list(shards), dim=0)
    if rule == COLS:
        return torch.cat(list(shards), dim=1)
    halves = [s.chunk(2, dim=0) for s in shards]
    return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)


def expert_index(name: str) -> Optional[Tuple[str, int, str]]:
    match = _EXPERT_RE.match(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2)), match.group(3)


def shard(full: Mapping[str, torch.Tensor], layout: Layout) -> StateDict:
    """Full megatron state dict -> this rank's (layout.tp_rank / ep_rank / etp_rank) local one."""
    out: StateDict = {}
    first = layout.ep_rank * layout.num_local_experts
    for name, tensor in full.items():
        parts = expert_index(name)
        if parts is None:
            out[name] = _take(tensor, split_rule(name), layout.tp_size, layout.tp_rank).contiguous()
            continue
        head, e, tail = parts
        if not first <= e < first + layout.num_local_experts:
            continue
        out[f"{head}{e - first}{tail}"] = _take(
            tensor, split_rule(name), layout.etp_size, layout.etp_rank).contiguous()
    return out
