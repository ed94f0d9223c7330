import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from configs.schema import TrainerConfig
from policies.training import checkpoint as ckpt
from policies.sample_types import TrainSample
from policies.training.trainer import Trainer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


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
    ckpt.write_meta(path, {**meta, "backend": "megatron"})  # resealed: valid, but foreign
    with pytest.raises(ValueError, match="megatron"):
        trainer.load_checkpoint(path)


# -- checksums ---------------------------------------------------------------------------------
def flip_byte(path):
    with open(path, "r+b") as handle:
        handle.seek(os.path.getsize(path) // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))


def truncate(path):
    os.truncate(path, os.path.getsize(path) // 2)


def two_checkpoints(model_path, root):
    """A trainer that saved steps 1 and 2 (extra {"step": n})."""
    trainer = Trainer(config(), model_path, seed=0)
    for n in (1, 2):
        step(trainer, n)
        trainer.save_checkpoint(root, n, extra={"step": n})
    return trainer


def test_manifest_lists_every_file_with_its_sha256(model_path, tmp_path):
    trainer = Trainer(config(), model_path, seed=0)
    path = trainer.save_checkpoint(str(tmp_path), 1)
    meta = ckpt.read_meta(path)
    on_disk = sorted(os.listdir(path))
    assert on_disk == ["extra.pt", "meta.json", "model.safetensors", "optimizer-rank00000.pt", "rng-rank00000.pt"]
    assert sorted(meta[ckpt.FILES]) == [n for n in on_disk if n != ckpt.META]  # the rank parts are gone
    for name, entry in meta[ckpt.FILES].items():
        file_path = os.path.join(path, name)
        assert entry == {"sha256": ckpt.file_sha256(file_path), "bytes": os.path.getsize(file_path)}
    assert ckpt.check(path) is None


def test_files_are_hashed_while_written_except_safetensors(model_path, tmp_path, monkeypatch):
    trainer = Trainer(config(), model_path, seed=0)
    read_back = []
    real = ckpt.file_sha256
    monkeypatch.setattr(ckpt, "file_sha256", lambda path: read_back.append(os.path.basename(path)) or real(path))
    trainer.save_checkpoint(str(tmp_path), 1)
    assert read_back == [ckpt.MODEL]  # torch.save and JSON stream through the hash


@pytest.mark.parametrize("damage", [flip_byte, truncate], ids=["flipped-byte", "truncated"])
@pytest.mark.parametrize("name", [ckpt.MODEL, "optimizer-rank00000.pt", ckpt.EXTRA])
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous(model_path, tmp_path, caplog, damage, name):
    root = str(tmp_path)
    trainer = two_checkpoints(model_path, root)
    newest = os.path.join(root, "step-00000002")
    damage(os.path.join(newest, name))
    info = Trainer(config(), model_path, seed=0).load_checkpoint(root)
    assert (info["step"], info["version"], info["extra"]) == (1, 1, {"step": 1})
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(newest in m and name in m for m in warned), warned
    # One definition of "complete and valid" for every reader.
    assert ckpt.latest_checkpoint(root) == ckpt.resolve(root) == info["path"]
    assert [s for s, _ in ckpt.list_checkpoints(root)] == [1]
    with pytest.raises(ValueError, match=name):  # asked for by name: no silent fallback
        trainer.load_checkpoint(newest)


def test_a_damaged_meta_json_is_skipped(model_path, tmp_path, caplog):
    root = str(tmp_path)
    two_checkpoints(model_path, root)
    meta_path = os.path.join(root, "step-00000002", ckpt.META)
    meta = ckpt.read_meta(os.path.dirname(meta_path))
    ckpt.write_json({**meta, "step": 7})(meta_path)  # edited, not resealed
    assert ckpt.latest_checkpoint(root).endswith("step-00000001")
    with open(meta_path, "wb") as handle:
        handle.write(b'{"step": 2, "vers')  # cut short
    assert ckpt.latest_checkpoint(root).endswith("step-00000001")
    assert any("meta.json" in r.getMessage() for r in caplog.records)


def test_the_only_checkpoint_damaged_is_a_clear_error(model_path, tmp_path):
    trainer = Trainer(config(), model_path, seed=0)
    path = trainer.save_checkpoint(str(tmp_path), 1)
    flip_byte(os.path.join(path, "optimizer-rank00000.pt"))
    with pytest.raises(FileNotFoundError, match=r"optimizer-rank00000\.pt.*start without --resume"):
        trainer.load_checkpoint(str(tmp_path))
    assert ckpt.latest_checkpoint(str(tmp_path)) is None and ckpt.list_checkpoints(str(tmp_path)) == []


def test_a_checkpoint_without_checksums_loads_unverified(model_path, tmp_path, caplog):
    trainer = Trainer(config(), model_path, seed=0)
    step(trainer, 1)
    path = trainer.save_checkpoint(str(tmp_path), 1, extra={"old": True})
    meta = ckpt.read_meta(path)
    legacy = {k: v for k, v in meta.items() if k not in (ckpt.FILES, ckpt.META_SHA256)}
    ckpt.write_json({**legacy, "format": 1})(os.path.join(path, ckpt.META))  # as format 1 wrote it
    info = Trainer(config(), model_path, seed=0).load_checkpoint(str(tmp_path))
    assert (info["version"], info["extra"]) == (1, {"old": True})
    assert any("unverified" in r.getMessage() and path in r.getMessage() for r in caplog.records)


def test_ranks_manifest_parts_merge_into_one_meta(tmp_path):
    """Two ranks (threads, a threading barrier): rank 0's meta lists both ranks' files."""
    root, barrier = str(tmp_path), threading.Barrier(2, timeout=60)

    def rank(r):
        files = {ckpt.rank_file("rng", r): ckpt.write_torch({"rank": r})}
        return ckpt.save(root, 3, r, files, {"step": 3}, keep=2, barrier=barrier.wait)

    with ThreadPoolExecutor(2) as pool:
        assert len({f.result() for f in [pool.submit(rank, r) for r in (0, 1)]}) == 1  # result() re-raises
    path = os.path.join(root, "step-00000003")
    assert sorted(ckpt.read_meta(path)[ckpt.FILES]) == ["rng-rank00000.pt", "rng-rank00001.pt"]
    assert sorted(os.listdir(path)) == ["meta.json", "rng-rank00000.pt", "rng-rank00001.pt"]
    assert ckpt.check(path) is None


_KILLED_MID_SAVE = textwrap.dedent("""
    import sys, time
    from policies.training import checkpoint as ckpt
    from configs.schema import TrainerConfig
    from policies.training.trainer import Trainer
    from tests.policies.training.test_checkpoint import step

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
