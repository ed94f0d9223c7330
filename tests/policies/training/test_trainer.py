import pytest
import torch

from configs.schema import TrainerConfig
from policies.training.logprobs import sequence_logprobs
from policies.sample_types import TrainSample
from policies.training.trainer import Trainer, minibatch_split, minibatch_totals, pad_samples
from tests.policies.training.train_batches import batch_a, batch_b, grads, num_loss_tokens, samples


def test_pad_samples_right_pads_masks():
    batch = pad_samples(samples())
    assert batch["token_ids"].shape == (2, 5)
    assert batch["loss_mask"][1].tolist() == [0, 1, 1, 0, 0]
    assert batch["attention_mask"][1].tolist() == [1, 1, 1, 0, 0]


def test_pad_samples_never_trains_the_first_token():
    batch = pad_samples([TrainSample([1, 2], [1, 1], [0.0, -1.0], 1.0)])
    assert batch["loss_mask"][0].tolist() == [0, 1]


def test_train_step_updates_weights_and_version(model_path):
    trainer = Trainer(TrainerConfig(lr=1e-2), model_path)
    before = {k: v.clone() for k, v in trainer.backend.hf_state_dict().items()}
    stats = trainer.train_step(samples(), temperature=1.0, global_loss_tokens=5)
    assert stats["version"] == 1 == trainer.version and stats["grad_norm"] > 0
    assert stats["time_logprob_s"] >= 0 and stats["time_actor_update_s"] >= stats["time_logprob_s"]
    changed = [k for k, v in trainer.backend.hf_state_dict().items() if not torch.equal(v, before[k])]
    assert changed


def test_the_first_minibatch_is_clipped_against_its_own_forward_as_against_a_separate_one(model_path, monkeypatch):
    """Proximal log-probs of the first minibatch come from its optimizer step's own forward (the
    weights have not moved): one forward fewer, and the same update as with a separate forward."""
    cfg = TrainerConfig(lr=1e-2, minibatches=2, clip_eps_low=0.01, clip_eps_high=0.01)
    reused, separate = Trainer(cfg, model_path), Trainer(cfg, model_path)
    calls = []
    forward = reused.backend.sequence_logprobs
    monkeypatch.setattr(reused.backend, "sequence_logprobs", lambda *a: calls.append(1) or forward(*a))
    both = samples() * 2
    totals = minibatch_totals(both, 1, 2)
    stats = reused.train_step(both, 1.0, *totals)
    assert len(calls) == 3  # the second minibatch's proximal forward, then one forward per optimizer step

    def train_step_with_separate_forwards():  # the rule before: every proximal from a no-grad forward first
        parts = [pad_samples(p) for p in minibatch_split(both, 2)]
        with torch.no_grad():
            proximal = [separate.backend.sequence_logprobs(b["token_ids"], b["attention_mask"], 1.0) for b in parts]
        separate._set_lr()
        for index, batch in enumerate(parts):
            separate._optimizer_step([batch, proximal[index], None], 1.0, totals[0][index], totals[1][index])

    train_step_with_separate_forwards()
    for key, value in reused.backend.hf_state_dict().items():
        assert torch.allclose(value, separate.backend.hf_state_dict()[key], atol=1e-6), key
    assert stats["behavior_tokens"] == sum(sum(s.loss_mask[1:]) for s in both)


def test_the_data_parallel_layout_is_read_once_when_built(model_path, monkeypatch):
    trainer = Trainer(TrainerConfig(), model_path)
    assert trainer.dp_group is None and (trainer.dp_rank, trainer.dp_size) == (0, 1)

    def asked_again():
        raise AssertionError("data_parallel_group() asked again after the trainer was built")

    monkeypatch.setattr(trainer.backend, "data_parallel_group", asked_again)
    assert trainer.train_step(samples(), 1.0, 5)["version"] == 1


def test_positive_advantage_raises_its_tokens_logprob(model_path):
    trainer = Trainer(TrainerConfig(lr=1e-2, max_grad_norm=100.0), model_path)
    sample = [TrainSample([1, 5, 9, 12], [0, 0, 1, 1], [0.0, 0.0, -7.0, -7.0], 1.0)]
    batch = pad_samples(sample)
    model = trainer.backend.model
    with torch.no_grad():
        before = sequence_logprobs(model, batch["token_ids"], batch["attention_mask"])[0, 2:].sum()
    trainer.train_step(sample, temperature=1.0, global_loss_tokens=2)
    with torch.no_grad():
        after = sequence_logprobs(model, batch["token_ids"], batch["attention_mask"])[0, 2:].sum()
    assert after > before


def test_empty_share_still_steps(model_path):
    stats = Trainer(TrainerConfig(), model_path).train_step([], temperature=1.0, global_loss_tokens=0)
    assert stats["version"] == 1 and stats["loss"] == 0.0


def test_unknown_backend_is_refused(model_path):
    with pytest.raises(ValueError, match="trainer.backend"):
        Trainer(TrainerConfig(backend="jax"), model_path)


def test_kl_reference_is_the_frozen_initial_policy(model_path):
    assert Trainer(TrainerConfig(), model_path).reference is None
    trainer = Trainer(TrainerConfig(lr=1e-2, kl_coef=0.5), model_path)
    first = trainer.train_step(samples(), 1.0, 5)
    assert trainer.reference is not None and abs(first["kl"]) < 1e-6  # policy == reference at step 1
    frozen = {k: v.clone() for k, v in trainer.reference.hf_state_dict().items()}
    second = trainer.train_step(samples(), 1.0, 5)
    assert second["kl"] > 0
    assert all(torch.equal(v, frozen[k]) for k, v in trainer.reference.hf_state_dict().items())


def test_seq_mean_shares_of_a_batch_sum_to_the_whole_batchs_gradient(model_path):
    """What data-parallel shards rely on: each share divides by the global number of trajectories."""
    cfg = TrainerConfig(lr=1e-2, max_grad_norm=1e9, loss_aggregation="seq_mean")
    batch = batch_a()
    whole = Trainer(cfg, model_path)
    whole.train_step(batch, 1.0, num_loss_tokens(batch), len(batch))
    shares = []
    for rank in range(2):
        share = Trainer(cfg, model_path)
        share.train_step(batch[rank::2], 1.0, num_loss_tokens(batch), len(batch))
        shares.append(grads(share.backend))
    for got_0, got_1, want in zip(*shares, grads(whole.backend)):
        torch.testing.assert_close(got_0 + got_1, want, rtol=0, atol=1e-6)
    token_mean = Trainer(TrainerConfig(lr=1e-2, max_grad_norm=1e9), model_path)
    token_mean.train_step(batch, 1.0, num_loss_tokens(batch), len(batch))
    assert any(not torch.allclose(a, b) for a, b in zip(grads(token_mean.backend), grads(whole.backend)))


# -- several optimizer steps per batch ------------------------------------------------------------
def test_minibatches_and_epochs_take_several_clipped_steps_in_one_update(model_path):
    cfg = TrainerConfig(lr=5e-2, ppo_epochs=2, minibatches=2, clip_eps_low=0.01, clip_eps_high=0.01)
    trainer = Trainer(cfg, model_path)
    batch = batch_a()
    tokens, rows = minibatch_totals(batch, 1, 2)
    assert rows == [2, 2] and sum(tokens) == num_loss_tokens(batch)
    stats = trainer.train_step(batch, 1.0, tokens, rows)
    # One update (one version), four optimizer steps; after the first, the policy has moved
    # away from the proximal one, so the ratio leaves 1 and the tight clip acts.
    assert stats["version"] == 1 and stats["optimizer_steps"] == 4
    assert stats["ratio_max"] > 1.01 and stats["clip_fraction"] > 0
    single = Trainer(TrainerConfig(lr=5e-2), model_path).train_step(batch, 1.0, num_loss_tokens(batch))
    assert single["optimizer_steps"] == 1 and single["ratio_max"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="trainer.minibatches is 2"):
        trainer.train_step(batch, 1.0, num_loss_tokens(batch))


def test_minibatch_shares_sum_to_the_whole_minibatchs_gradient(model_path):
    """Two data-parallel shares, two minibatches each: the first step's gradients add up."""
    cfg = TrainerConfig(lr=1e-2, max_grad_norm=1e9, minibatches=2)
    batch = batch_a() + batch_b()
    tokens, rows = minibatch_totals(batch, 2, 2)
    first = {}
    for name, share in (("whole", batch), ("r0", batch[0::2]), ("r1", batch[1::2])):
        trainer = Trainer(TrainerConfig(**{**cfg.__dict__, "minibatches": 1}), model_path)
        if name == "whole":
            # The whole of minibatch 0 is what the two shares' minibatch 0 hold together.
            part = minibatch_split(batch[0::2], 2)[0] + minibatch_split(batch[1::2], 2)[0]
            trainer.train_step(part, 1.0, tokens[0], rows[0])
        else:
            trainer.train_step(minibatch_split(share, 2)[0], 1.0, tokens[0], rows[0])
        first[name] = grads(trainer.backend)
    for g0, g1, want in zip(first["r0"], first["r1"], first["whole"]):
        torch.testing.assert_close(g0 + g1, want, rtol=0, atol=1e-6)


def test_lr_warms_up_linearly_by_version(model_path):
    trainer = Trainer(TrainerConfig(lr=1e-3, lr_warmup_steps=4), model_path)
    lrs = [trainer.train_step(samples(), 1.0, 5)["lr"] for _ in range(5)]
    assert lrs == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3])


def own_logprobs(trainer: Trainer, ids: list[int]) -> list[float]:
    """The trainer's own log-probs of `ids`: behaviour log-probs are made as offsets from these."""
    with torch.no_grad():
        return sequence_logprobs(trainer.backend.model, torch.tensor([ids]),
                                 torch.ones(1, len(ids), dtype=torch.long))[0].tolist()


def test_mismatch_compares_only_tokens_sampled_at_the_trainers_version(model_path):
    trainer = Trainer(TrainerConfig(lr=1e-3), model_path)
    ids = [1, 5, 9, 12, 7]
    own = own_logprobs(trainer, ids)
    behavior = [own[0], own[1], own[2] - 0.5, own[3] - 0.5, own[4] + 3.0]
    sample = TrainSample(ids, [0, 0, 1, 1, 1], behavior, 1.0, versions=[-1, -1, 0, 0, 7])
    stats = trainer.train_step([sample], 1.0, 3)
    # Tokens 2 and 3 were sampled at version 0 (the trainer's): each is 0.5 off. Token 4 came from
    # another version and only enters the behaviour KL.
    assert stats["mismatch_tokens"] == 2 and stats["mismatch_abs_sum"] == pytest.approx(1.0, abs=1e-5)
    assert stats["behavior_tokens"] == 3 and stats["behavior_kl_sum"] > stats["mismatch_kl_sum"] > 0


def test_behavior_kl_is_the_k3_mean_over_the_tokens_trained(model_path):
    """rollout.staleness_unit=token masks stale tokens out of the loss mask: they leave the KL too."""
    import math

    trainer = Trainer(TrainerConfig(lr=1e-3), model_path)
    ids = [1, 5, 9, 12, 7]
    own = own_logprobs(trainer, ids)
    # Token 4 was generated but masked as stale; its behaviour log-prob is far off and must not count.
    behavior = [0.0, 0.0, own[2] - 0.5, own[3] + 0.25, own[4] - 5.0]
    sample = TrainSample(ids, [0, 0, 1, 1, 0], behavior, 1.0, versions=[-1, -1, 3, 4, 1])
    stats = trainer.train_step([sample], 1.0, 2)
    k3 = [math.exp(d) - 1.0 - d for d in (0.5, -0.25)]  # d = trainer - behaviour
    assert stats["behavior_tokens"] == 2
    assert stats["behavior_kl_sum"] / stats["behavior_tokens"] == pytest.approx(sum(k3) / 2, abs=1e-4)
