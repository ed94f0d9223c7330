"""The shard's role: lazy build, rendezvous and join, weight export, checkpoints over ranks.
The training step itself is tested in tests/policies/training/test_trainer.py."""
import errno
import os
import socket

import pytest
import safetensors.torch
import torch
import torch.multiprocessing as mp

from actors.training.trainer_shard import TrainerShard
from configs.schema import TrainerConfig
from policies.engines.process import free_port
from tests.policies.training.train_batches import batch_a, batch_b, grads, num_loss_tokens, samples


@pytest.mark.slow
def test_construction_builds_nothing_until_join_or_first_use(model_path):
    shard = TrainerShard(0, 1, TrainerConfig(), model_path, seed=0)
    assert shard.trainer is None
    shard.hf_state_dict()
    assert type(shard.trainer.backend).__name__ == "TorchBackend" and shard.trainer.optimizer is not None


@pytest.mark.slow
def test_rank_of_a_group_must_join_before_training(model_path):
    shard = TrainerShard(1, 2, TrainerConfig(), model_path, seed=0)
    with pytest.raises(RuntimeError, match="join"):
        shard.train_step(samples(), 1.0, 5)


@pytest.mark.slow
def test_rank_zero_already_listens_on_the_rendezvous_port_it_hands_out(model_path):
    # A port merely free when picked can be taken before the store binds it (EADDRINUSE in CI).
    shard = TrainerShard(0, 2, TrainerConfig(), model_path, seed=0)
    address, port = shard.rendezvous_address()
    assert shard.rendezvous_address() == (address, port)
    with socket.socket() as other, pytest.raises(OSError) as taken:
        other.bind((address, port))
    assert taken.value.errno == errno.EADDRINUSE
    shard.close()


def test_unknown_backend_is_refused_at_construction(model_path):
    with pytest.raises(ValueError, match="trainer.backend"):
        TrainerShard(0, 1, TrainerConfig(backend="jax"), model_path, seed=0)


def test_weight_exports_load_as_hf_models(model_path, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from policies.model import load_model

    shard = TrainerShard(0, 1, TrainerConfig(lr=1e-2), model_path, seed=0)
    assert shard.train_step(samples(), 1.0, 5)["version"] == 1
    meta, weights = shard.export_weights()
    assert meta["version"] == 1 and meta["time_export_s"] >= 0
    exported, state = safetensors.torch.load(weights), shard.hf_state_dict()
    assert set(exported) == set(state) and all(torch.equal(exported[k], state[k]) for k in state)
    out = shard.export_hf(str(tmp_path / "hf"))
    assert os.path.isfile(os.path.join(out, "model.safetensors"))
    assert os.path.isfile(os.path.join(out, "tokenizer.json"))
    ids = torch.tensor([[1, 5, 9, 12, 7]])
    with torch.no_grad():
        expected = shard.trainer.backend.model(input_ids=ids).logits
        for loaded in (AutoModelForCausalLM.from_pretrained(out), load_model(out)):
            torch.testing.assert_close(loaded(input_ids=ids).logits, expected, rtol=0, atol=1e-6)
    AutoTokenizer.from_pretrained(out)


# -- two ranks, gloo --------------------------------------------------------------------------
def _run_rank(rank, world, port, model_path, out_dir):
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    cfg = TrainerConfig(lr=1e-2, max_grad_norm=1e9, grad_bucket_mb=1)  # small buckets: several all-reduces
    shard = TrainerShard(rank, world, cfg, model_path, seed=0)
    shard.join("127.0.0.1", port)
    result = {"dp": shard.dp_rank_and_size()}
    a, b = batch_a(), batch_b()
    result["loss_a"] = shard.train_step(a[rank::world], 1.0, num_loss_tokens(a))["loss"]
    result["grads_a"] = grads(shard.trainer.backend)
    result["weights_a"] = shard.hf_state_dict()
    # Batch B has one sample: rank 1's part is empty and it still joins the all-reduce.
    result["loss_b"] = shard.train_step(b[rank::world], 1.0, num_loss_tokens(b))["loss"]
    result["grads_b"] = grads(shard.trainer.backend)
    result["weights"] = shard.hf_state_dict()
    # A collective checkpoint: rank 0 writes model + optimizer, every rank its RNG states.
    shard.save_checkpoint(os.path.join(out_dir, "ckpt"), 2, {"who": "driver"})
    result["restored"] = shard.load_checkpoint(os.path.join(out_dir, "ckpt"))
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    shard.close()


def _spawned(rank, world, port, model_path, out_dir):
    torch.set_num_threads(1)
    _run_rank(rank, world, port, model_path, out_dir)


@pytest.mark.slow
def test_two_ranks_match_one_process_over_the_full_batch(model_path, tmp_path):
    mp.spawn(_spawned, args=(2, free_port(), model_path, str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    assert [r["dp"] for r in ranks] == [(0, 2), (1, 2)]
    saved = sorted(os.listdir(tmp_path / "ckpt" / "step-00000002"))
    assert saved == ["extra.pt", "meta.json", "model.safetensors", "optimizer-rank00000.pt",
                     "rng-rank00000.pt", "rng-rank00001.pt"]
    assert [(r["restored"]["version"], r["restored"]["extra"]) for r in ranks] == [(2, {"who": "driver"})] * 2

    single = TrainerShard(0, 1, TrainerConfig(lr=1e-2, max_grad_norm=1e9), model_path, seed=0)
    loss_a = single.train_step(batch_a(), 1.0, num_loss_tokens(batch_a()))["loss"]
    grads_a = grads(single.trainer.backend)
    weights_a = single.hf_state_dict()
    assert abs(sum(r["loss_a"] for r in ranks) - loss_a) < 1e-5
    for r in ranks:
        for got, want in zip(r["grads_a"], grads_a):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
        assert_same_adam_step(r["weights_a"], weights_a, lr=1e-2)

    # Step B from the ranks' own weights: Adam's first step moved a few weights by noise (below),
    # and gradients at different weights would compare that noise, not the all-reduce.
    single.trainer.backend.load_hf_state_dict(ranks[0]["weights_a"])
    loss_b = single.train_step(batch_b(), 1.0, num_loss_tokens(batch_b()))["loss"]
    grads_b = grads(single.trainer.backend)
    assert abs(sum(r["loss_b"] for r in ranks) - loss_b) < 1e-5
    for r in ranks:
        for got, want in zip(r["grads_b"], grads_b):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
        assert_same_adam_step(r["weights"], single.hf_state_dict(), lr=1e-2)


def assert_same_adam_step(got: dict, want: dict, lr: float):
    """Adam moves each weight by about lr * g / (|g| + eps): where a gradient cancels to about eps
    (1e-8), summation-order noise in g (1e-7 here) moves that weight by up to 2 * lr. Such weights are
    rare; a wrong all-reduce or a skipped step moves nearly all of them by ~lr."""
    for name, value in want.items():
        off = (got[name] - value).abs()
        assert off.max() <= 2 * lr, name
        assert (off > 1e-4).float().mean() < 1e-3, f"{name}: {int((off > 1e-4).sum())} of {off.numel()} weights off"


# -- megatron backend through the shard ------------------------------------------------------
@pytest.mark.slow
def test_megatron_backend_trains_like_torch_and_resumes(model_path, tmp_path):
    pytest.importorskip("megatron.core")
    batch = batch_a()
    tokens = num_loss_tokens(batch)
    reference = TrainerShard(0, 1, TrainerConfig(lr=1e-3), model_path, seed=0)
    want = [reference.train_step(batch, 1.0, tokens) for _ in range(3)]

    cfg = TrainerConfig(backend="megatron", lr=1e-3)
    shard = TrainerShard(0, 1, cfg, model_path, seed=0)  # world size 1: the backend makes a one-rank group
    got = [shard.train_step(batch, 1.0, tokens)]
    assert type(shard.trainer.backend).__name__ == "MegatronBackend"
    shard.save_checkpoint(str(tmp_path / "ckpt"), 1, {"k": 1})
    got.append(shard.train_step(batch, 1.0, tokens))
    shard.close()
    resumed = TrainerShard(0, 1, cfg, model_path, seed=0)
    assert resumed.load_checkpoint(str(tmp_path / "ckpt"))["version"] == 1
    got += [resumed.train_step(batch, 1.0, tokens) for _ in range(2)]
    assert abs(got[2]["loss"] - got[1]["loss"]) < 1e-5 and got[2]["version"] == 2  # resumed = uninterrupted
    for ours, theirs in zip([got[0], got[1], got[3]], want):
        assert abs(ours["loss"] - theirs["loss"]) < 1e-4 and abs(ours["grad_norm"] - theirs["grad_norm"]) < 1e-3
    resumed.close()
