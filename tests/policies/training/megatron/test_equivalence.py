"""megatron-core GPTModel vs the Hugging Face model: same log-probs, GRPO loss and gradients."""
from __future__ import annotations

import pytest
import torch

from configs.schema import TrainerConfig
from policies.training.logprobs import sequence_logprobs
from policies.training.losses import grpo_loss
from policies.training.megatron.backend import MegatronBackend
from policies.training.megatron.convert import to_hf
from policies.training.megatron.model import MegatronOptions
from policies.model import load_model

TOL = 1e-4


def _batch(vocab: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (3, 14), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0  # right padding
    mask[2, 5:] = 0
    ids = ids * mask
    return ids, mask


def _grpo(logprobs, mask, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    old = (logprobs.detach() + 0.05 * torch.randn(logprobs.shape, generator=gen)) * mask
    behavior = (old + 0.05 * torch.randn(logprobs.shape, generator=gen)) * mask
    loss_mask = mask.clone()
    loss_mask[:, :3] = 0  # prompt tokens
    advantages = torch.tensor([1.0, -0.5, 0.25])
    return grpo_loss(logprobs, old, advantages, loss_mask, behavior_logprobs=behavior)


def _check(backend, hf_model, vocab, temperature=0.8, grads=True):
    ids, mask = _batch(vocab)
    ref = sequence_logprobs(hf_model, ids, mask, temperature)
    got = backend.sequence_logprobs(ids, mask, temperature)
    assert got.shape == ref.shape
    assert torch.all(got[:, 0] == 0) and torch.all(got[2, 5:] == 0)
    assert (got - ref).abs().max().item() < TOL
    if not grads:
        return
    ref_loss, _ = _grpo(ref, mask)
    got_loss, _ = _grpo(got, mask)
    assert abs(ref_loss.item() - got_loss.item()) < TOL
    ref_loss.backward()
    got_loss.backward()
    ref_grads = {n: p.grad for n, p in hf_model.named_parameters() if p.grad is not None}
    ref_norm = torch.sqrt(sum(g.double().pow(2).sum() for g in ref_grads.values()))
    assert abs(backend.grad_norm().item() - ref_norm.item()) < TOL * max(1.0, ref_norm.item())
    # Gradients mapped back to HF names match tensor by tensor (world size 1: local = full).
    got_grads = to_hf({n: p.grad for n, p in backend.named_parameters()}, backend.layout)
    for name, grad in got_grads.items():
        if name in ref_grads:
            torch.testing.assert_close(grad, ref_grads[name], atol=TOL, rtol=1e-3, msg=name)


@pytest.fixture(scope="module")
def trainer_cfg():
    return TrainerConfig(backend="megatron")


@pytest.mark.slow
def test_world_size_1_without_process_group(make_checkpoint):
    """The shard initialises torch.distributed only when world_size > 1; the backend copes."""
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group already exists in this test session")
    path = make_checkpoint("dense_untied", tie_word_embeddings=False)
    backend = MegatronBackend(None, path, rank=0, world_size=1, options=MegatronOptions())
    try:
        _check(backend, load_model(path), 101, grads=False)
    finally:
        backend.close()
    assert not dist.is_initialized()


@pytest.mark.slow
def test_dense_project_model_matches_hf(gloo_world1, trainer_cfg, model_path):
    """The tiny Qwen3 that `policies.model.ensure_model` builds (tied embeddings)."""
    hf_model = load_model(model_path)
    backend = MegatronBackend(trainer_cfg, model_path, rank=0, world_size=1)
    try:
        _check(backend, hf_model, hf_model.config.vocab_size)
        # The weights come back unchanged, under the checkpoint's names.
        state = backend.hf_state_dict()
        hf_state = hf_model.state_dict()
        assert "lm_head.weight" not in state
        for name, tensor in state.items():
            assert torch.equal(tensor, hf_state[name]), name
    finally:
        backend.close()


def test_dense_untied_after_optimizer_step(gloo_world1, trainer_cfg, make_checkpoint):
    path = make_checkpoint("dense_untied", tie_word_embeddings=False)
    hf_model = load_model(path)
    backend = MegatronBackend(trainer_cfg, path, rank=0, world_size=1, options=MegatronOptions())
    try:
        _check(backend, hf_model, 101)
        with pytest.raises(ValueError, match="right-padded"):
            backend.sequence_logprobs(torch.tensor([[0, 5, 6]]), torch.tensor([[0, 1, 1]]), 1.0)
        # One identical SGD step on both sides keeps them equal.
        for params in (backend.parameters(), hf_model.parameters()):
            torch.optim.SGD(params, lr=1e-2).step()
        hf_model.zero_grad()
        backend.model.zero_grad()
        _check(backend, hf_model, 101, grads=False)
        # load_hf_state_dict puts HF weights back (here: the stepped HF model's).
        backend.load_hf_state_dict(hf_model.state_dict())
        _check(backend, hf_model, 101, temperature=1.0, grads=False)
    finally:
        backend.close()


@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_moe_matches_hf(gloo_world1, trainer_cfg, make_checkpoint, norm_topk_prob):
    path = make_checkpoint(f"moe_norm{norm_topk_prob}", moe=True, norm_topk_prob=norm_topk_prob)
    hf_model = load_model(path)
    backend = MegatronBackend(trainer_cfg, path, rank=0, world_size=1)
    try:
        _check(backend, hf_model, 101)
        backend.all_reduce_grads()  # world size 1: a no-op that must keep the grads
        norm = backend.clip_grad_norm_(1.0)
        assert norm.item() > 1.0
        assert abs(backend.grad_norm().item() - 1.0) < 1e-4
        assert not backend.optimizer_is_sharded and not backend.requires_lockstep
    finally:
        backend.close()


def test_options_come_from_trainer_config():
    cfg = TrainerConfig(backend="megatron", expert_parallel_size=2, moe_aux_loss_coeff=0.5)
    options = MegatronOptions.from_trainer_config(cfg)
    assert options.expert_parallel_size == 2 and options.moe_aux_loss_coeff == 0.5
    with pytest.raises(ValueError, match="lacks the megatron backend's fields"):
        MegatronOptions.from_trainer_config(object())
    with pytest.raises(ValueError, match="params_dtype"):
        MegatronOptions(params_dtype="int8").validate()
