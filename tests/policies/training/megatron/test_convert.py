"""HF <-> megatron weight conversion: exact round trips, TP/EP sharding, the CPU shim."""
from __future__ import annotations

import itertools

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig

from policies.training.megatron import convert
from policies.training.megatron.convert import (Layout, StateDict, expert_index, from_hf, is_expert, layout_from_hf_config,
                                       merge_shards, shard, split_rule, to_hf)


# The inverse of `shard` over every rank's local dict (the backend gathers with collectives instead):
# the round trips below check `shard` against it.
def unshard(locals_by_rank: dict, layout: Layout) -> StateDict:
    """All ranks' local state dicts, keyed by (tp_rank, ep_rank, etp_rank) -> full state dict.

    Only the ranks that hold distinct pieces are needed: every tp_rank (at ep_rank 0) for
    the dense parameters, and every (ep_rank, etp_rank) for the experts.
    """
    out: StateDict = {}
    dense_ranks = [_find_tp(locals_by_rank, t) for t in range(layout.tp_size)]
    for name in dense_ranks[0]:
        if is_expert(name):
            continue
        out[name] = merge_shards([d[name] for d in dense_ranks], split_rule(name))
    for ep in range(layout.ep_size if layout.is_moe else 0):
        expert_ranks = [_find_expert(locals_by_rank, ep, r) for r in range(layout.etp_size)]
        for name in expert_ranks[0]:
            parts = expert_index(name)
            if parts is None:
                continue
            head, j, tail = parts
            out[f"{head}{ep * layout.num_local_experts + j}{tail}"] = merge_shards(
                [d[name] for d in expert_ranks], split_rule(name))
    return out


def _find_tp(locals_by_rank, tp_rank):
    for (t, _e, _et), state in locals_by_rank.items():
        if t == tp_rank:
            return state
    raise KeyError(f"no local state for tp_rank {tp_rank}")


def _find_expert(locals_by_rank, ep_rank, etp_rank):
    for (_t, e, et), state in locals_by_rank.items():
        if e == ep_rank and et == etp_rank:
            return state
    raise KeyError(f"no local state for ep_rank {ep_rank}, etp_rank {etp_rank}")


def _load(path):
    return AutoConfig.from_pretrained(path), load_file(f"{path}/model.safetensors")


def _round_trip(hf, config, tp, ep):
    layout = layout_from_hf_config(config, tp_size=tp, ep_size=ep)
    full = from_hf(hf, layout)
    locals_by_rank = {}
    for t, e in itertools.product(range(tp), range(ep)):
        rank_layout = layout.with_ranks(tp_rank=t, ep_rank=e, etp_rank=t % layout.etp_size)
        locals_by_rank[(t, e, t % layout.etp_size)] = shard(full, rank_layout)
    back = to_hf(unshard(locals_by_rank, layout), layout)
    return layout, locals_by_rank, back


def _assert_equal(a, b):
    assert sorted(a) == sorted(b)
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("tp,ep", [(1, 1), (2, 1)])
@pytest.mark.parametrize("tied", [True, False])
def test_dense_round_trip_exact(make_checkpoint, tp, ep, tied):
    path = make_checkpoint(f"dense_tied{tied}", tie_word_embeddings=tied)
    config, hf = _load(path)
    layout, locals_by_rank, back = _round_trip(hf, config, tp, ep)
    _assert_equal(back, hf)
    if tp == 2:
        # Odd vocab 101 is padded to 102; each rank holds 51 rows of the embedding.
        assert layout.padded_vocab_size == 102
        rank1 = locals_by_rank[(1, 0, 1)]
        assert rank1["embedding.word_embeddings.weight"].shape == (51, 64)
        assert torch.equal(rank1["embedding.word_embeddings.weight"][-1], torch.zeros(64))
        # Row-parallel o_proj: split along the input dim.
        assert rank1["decoder.layers.0.self_attention.linear_proj.weight"].shape == (64, 32)
        # Column-parallel fc1 on rank 1 = [gate rows 48:96; up rows 48:96].
        fc1 = rank1["decoder.layers.0.mlp.linear_fc1.weight"]
        assert torch.equal(fc1[:48], hf["model.layers.0.mlp.gate_proj.weight"][48:])
        assert torch.equal(fc1[48:], hf["model.layers.0.mlp.up_proj.weight"][48:])


def test_qkv_is_interleaved_per_query_group(make_checkpoint):
    config, hf = _load(make_checkpoint("dense_tiedTrue", tie_word_embeddings=True))
    layout = layout_from_hf_config(config)
    qkv = from_hf(hf, layout)["decoder.layers.1.self_attention.linear_qkv.weight"]
    q = hf["model.layers.1.self_attn.q_proj.weight"]
    k = hf["model.layers.1.self_attn.k_proj.weight"]
    v = hf["model.layers.1.self_attn.v_proj.weight"]
    hd = 16  # 4 heads, 2 groups: [q0 q1 k0 v0 | q2 q3 k1 v1]
    expected = torch.cat([q[: 2 * hd], k[:hd], v[:hd], q[2 * hd:], k[hd:], v[hd:]])
    assert torch.equal(qkv, expected)
    # TP=2: rank 1 holds exactly the second group.
    rank1 = shard({"decoder.layers.1.self_attention.linear_qkv.weight": qkv},
                  layout_from_hf_config(config, tp_size=2).with_ranks(tp_rank=1, etp_rank=1))
    assert torch.equal(rank1["decoder.layers.1.self_attention.linear_qkv.weight"], expected[4 * hd:])


@pytest.mark.parametrize("tp,ep", [(1, 1), (1, 2), (2, 1), (2, 2)])
def test_moe_round_trip_exact(make_checkpoint, tp, ep):
    config, hf = _load(make_checkpoint("moe", moe=True))
    layout, locals_by_rank, back = _round_trip(hf, config, tp, ep)
    _assert_equal(back, hf)
    if ep == 2:
        # EP rank 1 holds global experts 2 and 3 as local experts 0 and 1.
        local = locals_by_rank[(0, 1, 0)]
        names = [n for n in local if ".mlp.experts." in n and n.startswith("decoder.layers.0.")]
        assert sorted({n.split(".")[6] for n in names}) == ["0", "1"]
        fc2 = local["decoder.layers.0.mlp.experts.local_experts.1.linear_fc2.weight"]
        expected = hf["model.layers.0.mlp.experts.3.down_proj.weight"]
        assert torch.equal(fc2, expected.chunk(tp, dim=1)[0])


def test_moe_accepts_in_memory_fused_experts_and_sparse_layers(make_checkpoint):
    path = make_checkpoint("moe_mixed", moe=True, mlp_only_layers=[0])
    config, hf = _load(path)
    layout = layout_from_hf_config(config)
    assert layout.moe_layers == (False, True)
    fused = {k: v for k, v in hf.items() if ".mlp.experts." not in k}
    prefix = "model.layers.1.mlp.experts."
    fused[prefix + "gate_up_proj"] = torch.stack([
        torch.cat([hf[f"{prefix}{e}.gate_proj.weight"], hf[f"{prefix}{e}.up_proj.weight"]])
        for e in range(4)])
    fused[prefix + "down_proj"] = torch.stack([hf[f"{prefix}{e}.down_proj.weight"] for e in range(4)])
    fused["lm_head.weight"] = hf["model.embed_tokens.weight"]  # tied: ignored
    _assert_equal(to_hf(from_hf(fused, layout), layout), hf)


def test_split_rules():
    assert convert.split_rule("decoder.layers.3.mlp.experts.local_experts.7.linear_fc1.weight") == convert.GATED_ROWS
    assert convert.split_rule("decoder.layers.0.self_attention.linear_proj.weight") == convert.COLS
    assert convert.split_rule("decoder.layers.0.mlp.router.weight") == convert.REPLICATED
    assert convert.split_rule("decoder.layers.0.self_attention.q_layernorm.weight") == convert.REPLICATED


@pytest.mark.slow
def test_cpu_shim_is_idempotent_and_local():
    from policies.training.megatron import cpu_shim

    real_cuda = torch.cuda
    cpu_shim.apply()
    cpu_shim.apply()
    assert torch.cuda is real_cuda  # the rest of the process keeps the real torch.cuda
    if cpu_shim.needed():
        import megatron.core.models.common.embeddings.rotary_pos_embedding as rope
        import megatron.core.transformer.moe.moe_utils as moe_utils
        from megatron.core.tensor_parallel import random as mrandom

        assert rope.torch.cuda.current_device() == torch.device("cpu")
        assert rope.torch.Tensor is torch.Tensor
        assert moe_utils.te_general_gemm is None
        assert mrandom._CUDA_RNG_STATE_TRACKER.is_inference_rng_tracker
