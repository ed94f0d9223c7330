import torch

from actors.trainer_shard import TrainerShard, pad_samples
from actors.trajectory import TrainSample
from configs.schema import TrainerConfig


def samples():
    return [
        TrainSample([1, 5, 9, 12, 7], [0, 0, 1, 1, 1], [0.0, 0.0, -7.0, -7.0, -7.0], 1.0),
        TrainSample([1, 5, 8], [0, 1, 1], [0.0, -7.0, -7.0], -1.0),
    ]


def test_pad_samples_right_pads_masks():
    batch = pad_samples(samples())
    assert batch["token_ids"].shape == (2, 5)
    assert batch["loss_mask"][1].tolist() == [0, 1, 1, 0, 0]
    assert batch["attention_mask"][1].tolist() == [1, 1, 1, 0, 0]


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
