"""run.loggers: TensorBoard event files read back with tensorboard's own reader, and the offline
W&B run directory read record by record."""
from __future__ import annotations

import glob
import json
import logging
import struct
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from wandb.proto import wandb_internal_pb2

from actors.report.loggers import RunLoggers, TensorBoardLogger
from configs import ConfigError, load_config

SECRET = "sk-swervetestsecret0123456789abcdef"
_WANDB_HEADER_BYTES = 7  # ":W&B", a 2-byte magic, a version byte
_BLOCK_BYTES = 32768  # records are framed as in LevelDB's log: crc32, length, type, data


def wandb_records(path: str) -> list:
    """Every record of a .wandb file (the datastore format of W&B's offline runs)."""
    data, records, pos, pending = Path(path).read_bytes(), [], _WANDB_HEADER_BYTES, b""
    while pos + 7 <= len(data):
        room = _BLOCK_BYTES - pos % _BLOCK_BYTES
        if room < 7:
            pos += room  # a block's tail too short for a header is padding
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if pos + 7 + length > len(data):
            break  # W&B's service is still writing this record (finished_records waits for the rest)
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
        elif kind == 0:
            break  # zero padding at the end
    return records


def _item_key(item) -> str:
    return item.key or "/".join(item.nested_key)


@pytest.fixture
def logged(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # a secret in the environment: blanked wherever it shows
    cfg = load_config(None, ["run.loggers=[jsonl,tensorboard,wandb]", "run.name=logtest",
                             f"sandbox.e2b_template={SECRET}"])
    loggers = RunLoggers(cfg, tmp_path)
    for step in (1, 2, 3):
        loggers.log_step(step, {"step": step, "reward_mean": step / 10, "infra_error_by_source": {"engine": 0.5},
                                "resolved_rate": 0.25, "note": SECRET})
    loggers.log_eval("base", 0, {"pass@1": 0.25, "pass@k": {"1": 0.25, "4": 0.5}})
    # An eval whose every attempt was an infra error has no pass rate: nothing logged, the run goes on.
    loggers.log_eval("sft", 1, {"pass@1": None, "pass@k": {"1": None}})
    loggers.log_eval("rl", 2, {"pass@1": 0.5, "pass@k": {"1": 0.5, "4": 0.75}})
    loggers.close()
    return tmp_path


@pytest.mark.slow
def test_tensorboard_holds_every_step_metric_and_the_eval_curve(logged):
    events = EventAccumulator(str(logged / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    assert [(e.step, round(e.value, 4)) for e in events.Scalars("reward_mean")] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert [e.value for e in events.Scalars("infra_error_by_source/engine")] == [0.5, 0.5, 0.5]
    assert [(e.step, e.value) for e in events.Scalars("eval/pass_at_1")] == [(0, 0.25), (2, 0.5)]
    assert "note" not in events.Tags()["scalars"]  # text is not a scalar
    config_text = b"".join(t.tensor_proto.string_val[0] for t in events.Tensors("config/text_summary"))
    assert b"sandbox:" in config_text and SECRET.encode() not in config_text
    raw = b"".join(path.read_bytes() for path in (logged / "tensorboard").glob("events.out.tfevents.*"))
    assert SECRET.encode() not in raw and b"hparams" in raw  # the hyperparameters plugin's record


def finished_records(path: str, timeout_s: float = 120.0) -> list:
    """The records of an offline run once W&B's service has written its last one (the exit record):
    the service writes the file in its own process and may still be at it when finish() returns."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = wandb_records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        if time.monotonic() > deadline:
            internal = Path(path).parent / "logs" / "debug-internal.log"
            tail = internal.read_text()[-3000:] if internal.exists() else "(no debug-internal.log)"
            raise AssertionError(f"{path} has no exit record after {timeout_s:.0f} s: "
                                 f"{[r.WhichOneof('record_type') for r in records]}\n{tail}")
        time.sleep(0.5)


@pytest.mark.slow
def test_an_offline_wandb_run_holds_the_steps_config_and_eval_summary(logged):
    (path,) = glob.glob(str(logged / "wandb" / "offline-run-*" / "run-*.wandb"))
    records = finished_records(path)
    history = [{_item_key(i): json.loads(i.value_json) for i in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]
    kinds = [r.WhichOneof("record_type") for r in records]
    assert [(h["_step"], h["reward_mean"]) for h in history] == [(1, 0.1), (2, 0.2), (3, 0.3)], kinds
    assert all(h["infra_error_by_source/engine"] == 0.5 for h in history)
    config = {_item_key(i): json.loads(i.value_json) for r in records if r.WhichOneof("record_type") == "run"
              for i in r.run.config.update}
    assert config["run.name"] == "logtest" and config["trainer.total_steps"] > 0
    summary = {_item_key(i): json.loads(i.value_json) for r in records if r.WhichOneof("record_type") == "summary"
               for i in r.summary.update}
    assert summary["eval/rl/pass_at_1"] == 0.5 and summary["eval/base/pass_at_4"] == 0.5
    assert SECRET.encode() not in Path(path).read_bytes()


def test_jsonl_cannot_be_left_out(tmp_path):
    with pytest.raises(ConfigError, match="must include jsonl"):
        RunLoggers(load_config(None, ["run.loggers=[tensorboard]"]), tmp_path)


def test_a_failing_logger_is_reported_once_and_dropped_while_the_run_goes_on(tmp_path, monkeypatch, caplog):
    cfg = load_config(None, ["run.loggers=[jsonl,tensorboard]"])
    loggers = RunLoggers(cfg, tmp_path)

    def broken(self, step, values):
        raise OSError("disk full")

    monkeypatch.setattr(TensorBoardLogger, "log_step", broken)
    with caplog.at_level(logging.WARNING, logger="actors.report.loggers"):
        loggers.log_step(1, {"step": 1, "reward_mean": 0.1})
        loggers.log_step(2, {"step": 2, "reward_mean": 0.2})
    assert caplog.text.count("disk full") == 1 and "dropped" in caplog.text
    loggers.close()


@pytest.mark.slow
def test_unreachable_wandb_falls_back_to_offline(tmp_path, monkeypatch, caplog):
    import wandb

    real_init = wandb.init

    def init(**kwargs):
        if kwargs.get("mode") != "offline":
            raise wandb.errors.CommError("could not reach api.wandb.ai")
        return real_init(**kwargs)

    monkeypatch.setattr(wandb, "init", init)
    cfg = load_config(None, ["run.loggers=[jsonl,wandb]"])
    with caplog.at_level(logging.WARNING, logger="actors.report.loggers"):
        loggers = RunLoggers(cfg, tmp_path)
    loggers.log_step(1, {"step": 1, "reward_mean": 0.1})
    loggers.close()
    assert "not reachable" in caplog.text and glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
