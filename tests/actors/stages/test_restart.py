"""When the driver checkpoints (actors.stages.restart.CheckpointCadence), without Ray."""
from pathlib import Path

import pytest

from actors.stages.restart import CheckpointCadence
from configs import load_config
from configs.schema import TrainerConfig

CONFIGS = sorted((Path(__file__).resolve().parents[3] / "configs").glob("*.yaml"))


def cadence(start_s=100.0, **fields):
    return CheckpointCadence(TrainerConfig(**fields), start_s=start_s)


def test_by_default_the_cadence_is_time_and_the_last_step():
    assert (TrainerConfig().checkpoint_interval, TrainerConfig().checkpoint_every_s) == (0, 600.0)
    c = cadence()
    assert not c.due(1, 50, now_s=100.0 + 599.0)
    assert c.due(1, 50, now_s=100.0 + 600.0)  # measured from the run's start
    assert c.due(50, 50, now_s=101.0)  # the last step, however soon


def test_time_is_counted_from_the_end_of_the_previous_save():
    c = cadence(checkpoint_every_s=60.0)
    assert c.due(3, 100, now_s=160.0)
    c.saved(now_s=175.0, cost_s=15.0)
    assert not c.due(4, 100, now_s=234.0)  # a slow save is not followed straight by another
    assert c.due(4, 100, now_s=235.0)


def test_steps_cadence_and_both_off():
    c = cadence(checkpoint_interval=5, checkpoint_every_s=0.0)
    assert [s for s in range(1, 13) if c.due(s, 12, now_s=1e9)] == [5, 10, 12]
    both = cadence(checkpoint_interval=5, checkpoint_every_s=30.0)
    assert both.due(5, 12, now_s=100.0) and both.due(4, 12, now_s=130.0) and not both.due(4, 12, now_s=129.0)
    off = cadence(checkpoint_interval=0, checkpoint_every_s=0.0)
    assert [s for s in range(1, 13) if off.due(s, 12, now_s=1e9)] == [12]


def test_negative_cadence_is_an_error():
    with pytest.raises(ValueError, match="checkpoint_every_s"):
        cadence(checkpoint_every_s=-1.0)
    with pytest.raises(ValueError, match="checkpoint_interval"):
        cadence(checkpoint_interval=-2)


def test_metrics_report_the_last_cost_and_the_overhead_fraction():
    c = cadence(start_s=0.0)
    assert c.metrics(now_s=0.0) == {"time_checkpoint_s": 0.0, "checkpoint_overhead_fraction": 0.0}
    assert c.metrics(now_s=10.0) == {"time_checkpoint_s": 0.0, "checkpoint_overhead_fraction": 0.0}
    c.saved(now_s=100.0, cost_s=2.0)
    c.saved(now_s=200.0, cost_s=3.0)
    assert c.metrics(now_s=250.0) == {"time_checkpoint_s": 3.0, "checkpoint_overhead_fraction": 5.0 / 250.0}
    assert c.saves == 2


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_recipe_checkpoints_before_its_last_step(path):
    trainer = load_config(str(path)).trainer
    assert trainer.checkpoint_every_s > 0 or 0 < trainer.checkpoint_interval < trainer.total_steps


def test_the_default_recipe_checkpoints_every_five_minutes():
    trainer = load_config("configs/default.yaml").trainer
    c = CheckpointCadence(trainer, start_s=0.0)
    assert trainer.checkpoint_every_s == 300.0
    assert not c.due(1, trainer.total_steps, now_s=299.0) and c.due(1, trainer.total_steps, now_s=300.0)
