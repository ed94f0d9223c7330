import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from configs.schema import TrainerConfig
from policies import checkpoint as ckpt
from policies.sample_types import TrainSample
from policies.trainer import Trainer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fixed_batch(step: int) -> list[TrainSample]:
    gen = torch.Generator().manual_seed(1000 + step)
    batch = []
    for i in range(3):
        n = 5 + i
        ids = torch.randint(3, 200, (n,), generator=gen).tolist()
        mask = [0, 0] + [1] * (n - 2)
        behavior = [0.0, 0.0] + (-7.0 + 0.3 * torch.randn(n - 2, generator=gen)).tolist()
        batch.append(TrainSample(ids, mask, behavior, [1.0, -1.0, 0.5][i] * (1 if step % 2 else -1)))
    return batch


def step(trainer, n):
    batch = fixed_batch(n)
    return trainer.train_step(batch, 1.0, sum(sum(s.loss_mask) for s in batch))


def config(**overrides):
    return TrainerConfig(lr=1e-3, **overrides)


def test_resumed_run_continues_exactly(model_path, tmp_path):
    straight = Trainer(config(), model_path, seed=0)
    expected = [step(straight, n) for n in range(1, 5)]

    first = Trainer(config(), model_path, seed=0)
    for n in (1, 2):
        step(first, n)
    path = first.save_checkpoint(str(tmp_path / "ckpt"), 2, extra={"collector": {"admitted": 7}})
    first.close()

    resumed = Trainer(config(), model_path, seed=5)
    info = resumed.load_checkpoint(str(tmp_path / "ckpt"))
    assert info == {"step": 2, "version": 2, "extra": {"collector": {"admitted": 7}}, "path": path}
    got = [step(resumed, n) for n in (3, 4)]
    assert [s["version"] for s in got] == [3, 4]
    for ours, theirs in zip(got, expected[2:]):
        assert abs(ours["loss"] - theirs["loss"]) < 1e-5
        assert abs(ours["grad_norm"] - theirs["grad_norm"]) < 1e-5
    for name, value in straight.backend.hf_state_dict().items():
        torch.testing.assert_close(resumed.backend.hf_state_dict()[name], value, rtol=0, atol=1e-6)


def test_rng_states_are_restored(model_path, tmp_path):
    trainer = Trainer(config(), model_path, seed=0)
    trainer.save_checkpoint(str(tmp_path), 1)
    draws = (random.random(), np.random.rand(), torch.rand(3))
    other = Trainer(config(), model_path, seed=99)
    other.load_checkpoint(str(tmp_path))
    assert random.random() == draws[0] and np.random.rand() == draws[1]
    assert torch.equal(torch.rand(3), draws[2])


def test_keeps_the_last_k_and_resaves_a_step(model_path, tmp_path):
    trainer = Trainer(config(keep_checkpoints=2), model_path, seed=0)
    for n in range(1, 5):
        step(trainer, n)
        trainer.save_checkpoint(str(tmp_path), n)
    trainer.save_checkpoint(str(tmp_path), 4, extra={"again": True})
    assert sorted(os.listdir(tmp_path)) == ["step-00000003", "step-00000004"]
    assert ckpt.latest_checkpoint(str(tmp_path)).endswith("step-00000004")
    assert trainer.load_checkpoint(str(tmp_path))["extra"] == {"again": True}
    assert trainer.load_checkpoint(str(tmp_path / "step-00000003"))["version"] == 3


def test_missing_or_foreign_checkpoint_is_an_error(model_path, tmp_path):
    trainer = Trainer(config(), model_path, seed=0)
    with pytest.raises(FileNotFoundError):
        trainer.load_checkpoint(str(tmp_path))
    path = trainer.save_checkpoint(str(tmp_path), 1)
    meta = ckpt.read_meta(path)
    ckpt.write_json({**meta, "backend": "megatron"})(os.path.join(path, ckpt.META))
    with pytest.raises(ValueError, match="megatron"):
        trainer.load_checkpoint(path)


_KILLED_MID_SAVE = textwrap.dedent("""
    import sys, time
    from policies import checkpoint as ckpt
    from configs.schema import TrainerConfig
    from policies.trainer import Trainer
    from tests.policies.test_checkpoint import step

    model_path, root, mode = sys.argv[1:4]
    trainer = Trainer(TrainerConfig(lr=1e-3), model_path)
    step(trainer, 1)
    trainer.save_checkpoint(root, 1, extra={"step": 1})
    print("SAVED", flush=True)
    if mode == "stall":
        fsync = ckpt.fsync_file
        def stalled(path):  # the first file of step 2 is on disk, the rest never comes
            fsync(path)
            print("WRITING", path, flush=True)
            time.sleep(600)
        ckpt.fsync_file = stalled
    for n in range(2, 1000):
        step(trainer, n)
        trainer.save_checkpoint(root, n, extra={"step": n})
""")


def _start(model_path, root, mode):
    return subprocess.Popen([sys.executable, "-c", _KILLED_MID_SAVE, model_path, root, mode], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONPATH": REPO})


def _wait_for(proc, marker):
    for line in proc.stdout:
        if line.startswith(marker):
            return line
    raise AssertionError(f"subprocess ended (rc {proc.wait()}) before printing {marker}")


@pytest.mark.slow
def test_sigkill_during_a_save_leaves_the_previous_checkpoint(model_path, tmp_path):
    root = str(tmp_path / "ckpt")
    proc = _start(model_path, root, "stall")
    try:
        _wait_for(proc, "SAVED")
        written = _wait_for(proc, "WRITING").split(maxsplit=1)[1].strip()
        assert "/.tmp-step-00000002/" in written
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert os.path.isdir(os.path.join(root, ".tmp-step-00000002"))  # the half-written save
    trainer = Trainer(config(), model_path, seed=0)
    info = trainer.load_checkpoint(root)
    assert (info["step"], info["version"], info["extra"]) == (1, 1, {"step": 1})
    trainer.save_checkpoint(root, 2)  # the next save clears the debris
    assert sorted(os.listdir(root)) == ["step-00000001", "step-00000002"]


@pytest.mark.slow
def test_sigkill_at_a_random_moment_of_repeated_saves(model_path, tmp_path):
    root = str(tmp_path / "ckpt")
    proc = _start(model_path, root, "loop")
    try:
        _wait_for(proc, "SAVED")
        time.sleep(random.uniform(0.2, 1.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    trainer = Trainer(config(), model_path, seed=0)
    info = trainer.load_checkpoint(root)
    assert info["extra"] == {"step": info["step"]} and info["version"] == info["step"] >= 1
