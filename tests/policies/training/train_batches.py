"""Small fixed batches the trainer tests (tests/policies/training/test_trainer.py, tests/actors/training/test_trainer_shard.py) train on."""
from __future__ import annotations

from policies.sample_types import TrainSample


def samples() -> list[TrainSample]:
    return [
        TrainSample([1, 5, 9, 12, 7], [0, 0, 1, 1, 1], [0.0, 0.0, -7.0, -7.0, -7.0], 1.0),
        TrainSample([1, 5, 8], [0, 1, 1], [0.0, -7.0, -7.0], -1.0),
    ]


def batch_a() -> list[TrainSample]:
    return [
        TrainSample([3, 4, 9, 12, 7, 2], [0, 0, 1, 1, 1, 1], [0.0, 0.0, -7.0, -6.0, -7.5, -7.0], 1.0),
        TrainSample([3, 5, 8], [0, 1, 1], [0.0, -7.0, -8.0], -1.0),
        TrainSample([6, 5, 8, 11], [0, 0, 1, 1], [0.0, 0.0, -7.2, -7.0], 0.5),
        TrainSample([7, 1, 2, 3, 4], [0, 1, 1, 0, 1], [0.0, -6.9, -7.1, 0.0, -7.3], -0.5),
    ]


def batch_b() -> list[TrainSample]:
    return [TrainSample([9, 8, 7, 6, 5], [0, 0, 1, 1, 1], [0.0, 0.0, -7.0, -7.0, -7.0], 1.0)]


def num_loss_tokens(batch: list[TrainSample]) -> int:
    return sum(sum(s.loss_mask[1:]) for s in batch)


def grads(backend) -> list:
    """A copy of every parameter's gradient, in parameter order."""
    return [p.grad.detach().clone() for p in backend.parameters()]
