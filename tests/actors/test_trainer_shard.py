import os

import pytest
import torch
import torch.multiprocessing as mp

from actors.trainer_shard import TrainerShard, minibatch_split, minibatch_totals, pad_samples
from actors.trajectory import TrainSample
from configs.schema import TrainerConfig
from policies.server.process import free_port


def samples():
    return [
        TrainSample([1, 5, 9, 12, 7], [0, 0, 1, 1, 1], [0.0, 0.0, -7.0, -7.0, -7.0], 1.0),
        TrainSample([1, 5, 8], [0, 1, 1], [0.0, -7.0, -7.0], -1.0),
    ]


def batch_a():
    return [
        TrainSample([3, 4, 9, 12, 7, 2], [0, 0, 1, 1, 1, 1], [0.0, 0.0, -7.0, -6.0, -7.5, -7.0], 1.0),
        TrainSample([3, 5, 8], [0, 1, 1], [0.0, -7.0, -8.0], -1.0),
        TrainSample([6, 5, 8, 11], [0, 0, 1, 1], [0.0, 0.0, -7.2, -7.0], 0.5),
        TrainSample([7, 1, 2, 3, 4], [0, 1, 1, 0, 1], [0.0, -6.9, -7.1, 0.0, -7.3], -0.5),
    ]


def batch_b():
    return [TrainSample([9, 8, 7, 6, 5], [0, 0, 1, 1, 1], [0.0, 0.0, -7.0, -7.0, -7.0], 1.0)]


def num_loss_tokens(batch):
    return sum(sum(s.loss_mask[1:]) for s in batch)


def test_pad_samples_right_pads_masks():
    batch = pad_samples(samples())
    assert batch["token_ids"].shape == (2, 5)
    assert batch["loss_mask"][1].tolist() == [0, 1, 1, 0, 0]
    assert batch["attention_mask"][1].tolist() == [1, 1, 1, 0, 0]


def test_pad_samples_never_trains_the_first_token():
    batch = pad_samples([TrainSample([1, 2], [1, 1], [0.0, -1.0], 1.0)])
    assert batch["loss_mask"][0].tolist() == [0, 1]


def test_train_step_updates_weights_and_version(model_path):
    shard = TrainerShard(0, 1, TrainerConfig(lr=1e-2), model_path, seed=0)
    before = {k: v.clone() for k, v in shard.state_dict().items()}
    stats = shard.train_step(samples(), temperature=1.0, global_loss_tokens=5)
    assert stats["version"] == 1 and stats["grad_norm"] > 0
    assert stats["time_logprob_s"] > 0 and stats["time_actor_update_s"] >= stats["time_logprob_s"]
    changed = [k for k, v in shard.state_dict().items() if not torch.equal(v, before[k])]
    assert changed


def test_positive_advantage_raises_its_tokens_logprob(model_path):
    from policies.logprobs import sequence_logprobs

    shard = TrainerShard(0, 1, TrainerConfig(lr=1e-2, max_grad_norm=100.0), model_path, seed=0)
    sample = [TrainSample([1, 5, 9, 12], [0, 0, 1, 1], [0.0, 0.0, -7.0, -7.0], 1.0)]
    batch = pad_samples(sample)
    with torch.no_grad():
        before = sequence_logprobs(shard.model, batch["token_ids"], batch["attention_mask"])[0, 2:].sum()
    shard.train_step(sample, temperature=1.0, global_loss_tokens=2)
    with torch.no_grad():
        after = sequence_logprobs(shard.model, batch["token_ids"], batch["attention_mask"])[0, 2:].sum()
    assert after > before


def test_empty_shard_still_steps(model_path):
    shard = TrainerShard(0, 1, TrainerConfig(), model_path, seed=0)
    stats = shard.train_step([], temperature=1.0, global_loss_tokens=0)
    assert stats["version"] == 1 and stats["loss"] == 0.0


def test_construction_builds_nothing_until_join_or_first_use(model_path):
    shard = TrainerShard(0, 1, TrainerConfig(), model_path, seed=0)
    assert shard.backend is None and shard.optimizer is None
    shard.hf_state_dict()
    assert type(shard.backend).__name__ == "TorchBackend" and shard.optimizer is not None


def test_rank_of_a_group_must_join_before_training(model_path):
    shard = TrainerShard(1, 2, TrainerConfig(), model_path, seed=0)
    with pytest.raises(RuntimeError, match="join"):
        shard.train_step(samples(), 1.0, 5)


def test_unknown_backend_is_refused_at_construction(model_path):
    with pytest.raises(ValueError, match="trainer.backend"):
        TrainerShard(0, 1, TrainerConfig(backend="jax"), model_path, seed=0)


def test_kl_reference_is_the_frozen_initial_policy(model_path):
    assert TrainerShard(0, 1, TrainerConfig(), model_path, seed=0).reference is None
    shard = TrainerShard(0, 1, TrainerConfig(lr=1e-2, kl_coef=0.5), model_path, seed=0)
    first = shard.train_step(samples(), 1.0, 5)
    assert shard.reference is not None and abs(first["kl"]) < 1e-6  # policy == reference at step 1
    frozen = {k: v.clone() for k, v in shard.reference.hf_state_dict().items()}
    second = shard.train_step(samples(), 1.0, 5)
    assert second["kl"] > 0
    assert all(torch.equal(v, frozen[k]) for k, v in shard.reference.hf_state_dict().items())


def test_weight_exports_load_as_hf_models(model_path, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from policies.model import load_model

    shard = TrainerShard(0, 1, TrainerConfig(lr=1e-2), model_path, seed=0)
    shard.train_step(samples(), 1.0, 5)
    exported = shard.export_weights()
    assert exported["version"] == 1 and exported["time_export_s"] >= 0
    assert set(exported["state_dict"]) == set(shard.state_dict())
    out = shard.export_hf(str(tmp_path / "hf"))
    assert os.path.isfile(os.path.join(out, "model.safetensors"))
    assert os.path.isfile(os.path.join(out, "tokenizer.json"))
    ids = torch.tensor([[1, 5, 9, 12, 7]])
    with torch.no_grad():
        expected = shard.model(input_ids=ids).logits
        for loaded in (AutoModelForCausalLM.from_pretrained(out), load_model(out)):
            torch.testing.assert_close(loaded(input_ids=ids).logits, expected, rtol=0, atol=1e-6)
    AutoTokenizer.from_pretrained(out)
    on_disk = shard.export_weights(str(tmp_path / "sync"))
    assert on_disk["path"] == str(tmp_path / "sync") and os.path.isfile(on_disk["path"] + "/config.json")


def test_seq_mean_shares_of_a_batch_sum_to_the_whole_batchs_gradient(model_path):
    """What data-parallel shards rely on: each share divides by the global number of trajectories."""
    cfg = TrainerConfig(lr=1e-2, max_grad_norm=1e9, loss_aggregation="seq_mean")
    batch = batch_a()
    whole = TrainerShard(0, 1, cfg, model_path, seed=0)
    whole.train_step(batch, 1.0, num_loss_tokens(batch), len(batch))
    shares = []
    for rank in range(2):
        shard = TrainerShard(0, 1, cfg, model_path, seed=0)
        shard.train_step(batch[rank::2], 1.0, num_loss_tokens(batch), len(batch))
        shares.append(_grads(shard))
    for got_0, got_1, want in zip(*shares, _grads(whole)):
        torch.testing.assert_close(got_0 + got_1, want, rtol=0, atol=1e-6)
    token_mean = TrainerShard(0, 1, TrainerConfig(lr=1e-2, max_grad_norm=1e9), model_path, seed=0)
    token_mean.train_step(batch, 1.0, num_loss_tokens(batch), len(batch))
    assert any(not torch.allclose(a, b) for a, b in zip(_grads(token_mean), _grads(whole)))


# -- two ranks, gloo --------------------------------------------------------------------------
def _grads(shard):
    return [p.grad.detach().clone() for p in shard.backend.parameters()]


def _run_rank(rank, world, port, model_path, out_dir):
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    cfg = TrainerConfig(lr=1e-2, max_grad_norm=1e9, grad_bucket_mb=1)  # small buckets: several all-reduces
    shard = TrainerShard(rank, world, cfg, model_path, seed=0)
    shard.join("127.0.0.1", port)
    result = {"dp": shard.dp_rank_and_size()}
    a, b = batch_a(), batch_b()
    result["loss_a"] = shard.train_step(a[rank::world], 1.0, num_loss_tokens(a))["loss"]
    result["grads_a"] = _grads(shard)
    # Batch B has one sample: rank 1's part is empty and it still joins the all-reduce.
    result["loss_b"] = shard.train_step(b[rank::world], 1.0, num_loss_tokens(b))["loss"]
    result["grads_b"] = _grads(shard)
    result["weights"] = shard.hf_state_dict()
    # A collective checkpoint: rank 0 writes model + optimizer, every rank its RNG states.
    shard.save_checkpoint(os.path.join(out_dir, "ckpt"), 2, {"who": "driver"})
    result["restored"] = shard.load_checkpoint(os.path.join(out_dir, "ckpt"))
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    shard.close()


def _spawned(rank, world, port, model_path, out_dir):
    torch.set_num_threads(1)
    _run_rank(rank, world, port, model_path, out_dir)


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
    grads_a = _grads(single)
    loss_b = single.train_step(batch_b(), 1.0, num_loss_tokens(batch_b()))["loss"]
    grads_b = _grads(single)

    assert abs(sum(r["loss_a"] for r in ranks) - loss_a) < 1e-5
    assert abs(sum(r["loss_b"] for r in ranks) - loss_b) < 1e-5
    for r in ranks:
        for got, want in zip(r["grads_a"], grads_a):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
        for got, want in zip(r["grads_b"], grads_b):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
        # Adam divides by sqrt(v): where a gradient is ~0, summation-order noise moves the update
        # by a fraction of lr (1e-2), so weights after two steps agree less tightly than grads.
        for name, value in single.hf_state_dict().items():
            torch.testing.assert_close(r["weights"][name], value, rtol=0, atol=1e-4)


# -- NCCL weight broadcast ----------------------------------------------------------------------
def _engine_side(port, backend, announced, out_dir):
    """Mimics SGLang's receiver: join at rank_offset 1, then per announced bucket allocate and
    receive every tensor with broadcast(src=0) in the announced order."""
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    from policies.weight_broadcast import init_weight_update_group

    if backend == "nccl":
        torch.cuda.set_device(1)
    group = init_weight_update_group("127.0.0.1", port, 2, rank=1, backend=backend)
    device = "cuda" if backend == "nccl" else "cpu"
    received = {}
    while True:
        item = announced.get(timeout=120)
        if item is None:
            break
        names, dtypes, shapes = item
        tensors = [torch.empty(s, dtype=getattr(torch, d), device=device) for d, s in zip(dtypes, shapes)]
        works = [torch.distributed.broadcast(t, src=0, group=group, async_op=True) for t in tensors]
        for work in works:
            work.wait()
        received.update({n: t.cpu() for n, t in zip(names, tensors)})
    torch.save(received, os.path.join(out_dir, "received.pt"))
    torch.distributed.destroy_process_group(group)


def _broadcast_roundtrip(backend: str, tmp_path):
    from policies.weight_broadcast import broadcast_weights_nccl, init_weight_update_group

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    ctx = mp.get_context("spawn")
    announced = ctx.Queue()
    port = free_port()
    engine = ctx.Process(target=_engine_side, args=(port, backend, announced, str(tmp_path)))
    engine.start()
    try:
        if backend == "nccl":
            torch.cuda.set_device(0)
        group = init_weight_update_group("127.0.0.1", port, 2, rank=0, backend=backend)
        weights = {f"layer{i}.weight": torch.randn(64, 32) for i in range(5)}
        weights["norm.weight"] = torch.randn(32).to(torch.bfloat16)
        calls = []

        def announce(names, dtypes, shapes):
            calls.append(names)
            announced.put((names, dtypes, shapes))

        device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
        stats = broadcast_weights_nccl(weights.items(), group, announce, bucket_bytes=3 * 64 * 32 * 4, device=device)
        announced.put(None)
        engine.join(timeout=120)
        assert engine.exitcode == 0
        received = torch.load(tmp_path / "received.pt", weights_only=False)
        assert stats["calls"] == len(calls) == 2 and set(received) == set(weights)
        for name, value in weights.items():
            assert received[name].dtype == value.dtype and torch.equal(received[name], value)
        torch.distributed.destroy_process_group(group)
    finally:
        if engine.is_alive():
            engine.kill()


def test_weight_broadcast_protocol_over_gloo(tmp_path):
    """The NCCL path's code, run over gloo on CPU against an SGLang-style receiver."""
    _broadcast_roundtrip("gloo", tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="gpu: NCCL weight broadcast needs two CUDA GPUs")
def test_weight_broadcast_over_nccl(tmp_path):
    # NCCL refuses two ranks on one device, so this needs two GPUs (trainer 0, engine 1).
    _broadcast_roundtrip("nccl", tmp_path)


# -- megatron backend through the shard ------------------------------------------------------
def test_megatron_backend_trains_like_torch_and_resumes(model_path, tmp_path):
    pytest.importorskip("megatron.core")
    batch = batch_a()
    tokens = num_loss_tokens(batch)
    reference = TrainerShard(0, 1, TrainerConfig(lr=1e-3), model_path, seed=0)
    want = [reference.train_step(batch, 1.0, tokens) for _ in range(3)]

    cfg = TrainerConfig(backend="megatron", lr=1e-3)
    shard = TrainerShard(0, 1, cfg, model_path, seed=0)  # world size 1: joins a one-rank group itself
    got = [shard.train_step(batch, 1.0, tokens)]
    assert type(shard.backend).__name__ == "MegatronBackend"
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


# -- several optimizer steps per batch ------------------------------------------------------------
def test_minibatches_and_epochs_take_several_clipped_steps_in_one_update(model_path):
    cfg = TrainerConfig(lr=5e-2, ppo_epochs=2, minibatches=2, clip_eps_low=0.01, clip_eps_high=0.01)
    shard = TrainerShard(0, 1, cfg, model_path, seed=0)
    batch = batch_a()
    tokens, rows = minibatch_totals(batch, 1, 2)
    assert rows == [2, 2] and sum(tokens) == num_loss_tokens(batch)
    stats = shard.train_step(batch, 1.0, tokens, rows)
    # One update (one version), four optimizer steps; after the first, the policy has moved
    # away from the proximal one, so the ratio leaves 1 and the tight clip acts.
    assert stats["version"] == 1 and stats["optimizer_steps"] == 4
    assert stats["ratio_max"] > 1.01 and stats["clip_fraction"] > 0
    single = TrainerShard(0, 1, TrainerConfig(lr=5e-2), model_path, seed=0).train_step(
        batch, 1.0, num_loss_tokens(batch))
    assert single["optimizer_steps"] == 1 and single["ratio_max"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="trainer.minibatches is 2"):
        shard.train_step(batch, 1.0, num_loss_tokens(batch))


def test_minibatch_shares_sum_to_the_whole_minibatchs_gradient(model_path):
    """Two data-parallel shares, two minibatches each: the first step's gradients add up."""
    cfg = TrainerConfig(lr=1e-2, max_grad_norm=1e9, minibatches=2)
    batch = batch_a() + batch_b()
    tokens, rows = minibatch_totals(batch, 2, 2)
    first = {}
    for name, share in (("whole", batch), ("r0", batch[0::2]), ("r1", batch[1::2])):
        shard = TrainerShard(0, 1, TrainerConfig(**{**cfg.__dict__, "minibatches": 1}), model_path, seed=0)
        if name == "whole":
            # The whole of minibatch 0 is what the two shares' minibatch 0 hold together.
            part = minibatch_split(batch[0::2], 2)[0] + minibatch_split(batch[1::2], 2)[0]
            shard.train_step(part, 1.0, tokens[0], rows[0])
        else:
            shard.train_step(minibatch_split(share, 2)[0], 1.0, tokens[0], rows[0])
        first[name] = _grads(shard)
    for g0, g1, want in zip(first["r0"], first["r1"], first["whole"]):
        torch.testing.assert_close(g0 + g1, want, rtol=0, atol=1e-6)


def test_lr_warms_up_linearly_by_version(model_path):
    shard = TrainerShard(0, 1, TrainerConfig(lr=1e-3, lr_warmup_steps=4), model_path, seed=0)
    lrs = [shard.train_step(samples(), 1.0, 5)["lr"] for _ in range(5)]
    assert lrs == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3])


def test_mismatch_compares_only_tokens_sampled_at_the_trainers_version(model_path):
    from policies.logprobs import sequence_logprobs

    shard = TrainerShard(0, 1, TrainerConfig(lr=1e-3), model_path, seed=0)
    ids = [1, 5, 9, 12, 7]
    with torch.no_grad():
        own = sequence_logprobs(shard.model, torch.tensor([ids]), torch.ones(1, 5, dtype=torch.long))[0].tolist()
    behavior = [own[0], own[1], own[2] - 0.5, own[3] - 0.5, own[4] + 3.0]
    sample = TrainSample(ids, [0, 0, 1, 1, 1], behavior, 1.0, versions=[-1, -1, 0, 0, 7])
    stats = shard.train_step([sample], 1.0, 3)
    # Tokens 2 and 3 were sampled at version 0 (the trainer's): each is 0.5 off. Token 4 came from
    # another version and only enters the behaviour KL.
    assert stats["mismatch_tokens"] == 2 and stats["mismatch_abs_sum"] == pytest.approx(1.0, abs=1e-5)
    assert stats["behavior_tokens"] == 3 and stats["behavior_kl_sum"] > stats["mismatch_kl_sum"] > 0
