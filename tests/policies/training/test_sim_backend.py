"""trainer.backend=sim: the trainer's real step, checkpoint and weights over one scalar; a step costs sim_step_s."""
import time

import pytest
import torch

from configs.schema import TrainerConfig
from policies.sample_types import TrainSample
from policies.training.sim_backend import PARAMETER, SimBackend
from policies.training.trainer import Trainer

SAMPLES = [TrainSample([1, 5, 9, 12], [0, 0, 1, 1], [0.0, 0.0, -1.0, -1.0], 1.0),
           TrainSample([3, 4], [0, 1], [0.0, -1.0], -1.0)]


def test_a_step_takes_the_calibrated_time_and_moves_the_version(model_path, tmp_path):
    trainer = Trainer(TrainerConfig(backend="sim", sim_step_s=0.3, lr=0.1), model_path)
    started = time.perf_counter()
    stats = trainer.train_step(SAMPLES, 1.0, 3)
    assert time.perf_counter() - started >= 0.3  # a lower bound: the sleep is the step
    assert stats["version"] == 1 and stats["time_actor_update_s"] >= 0.3 and stats["loss"] != 0.0
    assert set(trainer.backend.hf_state_dict()) == {PARAMETER}
    trainer.save_checkpoint(str(tmp_path / "ckpt"), 1, {"collector": {}})
    resumed = Trainer(TrainerConfig(backend="sim", sim_step_s=0.0), model_path)
    assert resumed.load_checkpoint(str(tmp_path / "ckpt"))["version"] == 1
    assert torch.equal(resumed.backend.hf_state_dict()[PARAMETER], trainer.backend.hf_state_dict()[PARAMETER])


def test_logprobs_have_the_real_backends_shape():
    backend = SimBackend(TrainerConfig(backend="sim", sim_step_s=0.0), "", 0, 1)
    mask = torch.tensor([[1, 1, 1], [0, 1, 1]])
    out = backend.sequence_logprobs(torch.ones(2, 3, dtype=torch.long), mask, 1.0)
    assert out.shape == (2, 3) and out[:, 0].eq(0).all() and out[1, 1].item() == -1.0


def test_foreign_weights_are_refused_with_the_fix():
    backend = SimBackend(TrainerConfig(backend="sim"), "", 0, 1)
    with pytest.raises(ValueError, match="trainer.backend"):
        backend.load_hf_state_dict({"model.embed_tokens.weight": torch.zeros(2)})
    with pytest.raises(ValueError, match="num_shards=1"):
        SimBackend(TrainerConfig(backend="sim"), "", 0, 2)
