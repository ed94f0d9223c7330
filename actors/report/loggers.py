"""Where a run's figures go beside metrics.jsonl (run.loggers): TensorBoard and Weights & Biases.

Each step's metrics become scalars at that step (nested ones, such as infra_error_by_source,
as `name/key`), each stage's eval its pass@1 and pass@k at the stage's index (a learning curve
base -> sft -> rl), and the resolved config the hyperparameters. Everything passes the
redactor first, so no key reaches a logger. A logger is a convenience, never a reason for a run
to fail: one that fails is reported once on the console with the reason and dropped, and W&B
that cannot reach its service goes offline (its run stays under runs/<name>/wandb for
`wandb sync`).
"""
from __future__ import annotations

import importlib
import logging
import math
import os
from pathlib import Path
from typing import Dict, List, Protocol, get_args

from actors.report import redact
from configs import Config, ConfigError, flat_config, to_yaml
from configs.schema import RunLogger

log = logging.getLogger(__name__)

WANDB_INIT_TIMEOUT_S = 30.0


class Logger(Protocol):
    def log_step(self, step: int, scalars: Dict[str, float]) -> None: ...

    def log_eval(self, stage: str, index: int, scalars: Dict[str, float]) -> None: ...

    def close(self) -> None: ...


def scalars(values: dict, prefix: str = "") -> Dict[str, float]:
    """The finite numbers of a (nested) mapping, keyed `outer/inner`; bools as 0/1."""
    out: Dict[str, float] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(scalars(value, name + "/"))
        elif isinstance(value, (bool, int, float)) and math.isfinite(float(value)):
            out[name] = float(value)
    return out


def hyperparameters(cfg: Config) -> Dict[str, object]:
    """The resolved config, secrets blanked, as `section.key` -> a number, bool or string."""
    return {key: value if isinstance(value, (bool, int, float, str)) else str(value)
            for key, value in flat_config(redact.redact(cfg)).items()}


def _require(logger: str, module: str):
    """The module a logger writes with; a clear error naming the install when it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ConfigError(f"run.loggers has {logger} but it is not installed ({error}): "
                          f"pip install {logger} (or swerve[loggers])") from error


class TensorBoardLogger:
    def __init__(self, path: Path, cfg: Config):
        tensorboard = _require("tensorboard", "torch.utils.tensorboard")
        self.writer = tensorboard.SummaryWriter(log_dir=str(path / "tensorboard"))
        self.writer.add_text("config", "```\n" + to_yaml(redact.redact(cfg)) + "\n```")
        # The hyperparameters plugin's records, in this run's own event file.
        for summary in tensorboard.summary.hparams(hyperparameters(cfg), {"reward_mean": 0.0}):
            self.writer.file_writer.add_summary(summary)
        self.writer.flush()

    def log_step(self, step: int, values: Dict[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_eval(self, stage: str, index: int, values: Dict[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(f"eval/{key}", value, index)
        self.writer.add_text("eval/stages", f"{index}: {stage}", index)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    def __init__(self, path: Path, cfg: Config):
        wandb = _require("wandb", "wandb")
        path.mkdir(parents=True, exist_ok=True)
        kwargs = dict(project=os.environ.get("WANDB_PROJECT", "swerve"), name=cfg.run.name, dir=str(path),
                      config=hyperparameters(cfg), reinit="create_new",
                      settings=wandb.Settings(init_timeout=WANDB_INIT_TIMEOUT_S, console="off", silent=True,
                                              disable_git=True, save_code=False, x_disable_stats=True))
        try:
            self.run = wandb.init(**kwargs)
        except Exception as error:  # noqa: BLE001 - any failure to reach W&B: keep the run, go offline
            log.warning("W&B is not reachable (%s): logging offline under %s/wandb (upload later: wandb sync)",
                        error, path)
            self.run = wandb.init(mode="offline", **kwargs)
        self.directory = Path(self.run.dir).parent  # runs/<name>/wandb/<offline-|>run-<time>-<id>

    def log_step(self, step: int, values: Dict[str, float]) -> None:
        self.run.log(values, step=step)

    def log_eval(self, stage: str, index: int, values: Dict[str, float]) -> None:
        for key, value in values.items():
            self.run.summary[f"eval/{stage}/{key}"] = value

    def close(self) -> None:
        self.run.finish()


# run.loggers -> the class writing there; jsonl is RunDir's own metrics.jsonl.
LOGGERS = {"tensorboard": TensorBoardLogger, "wandb": WandbLogger}
if set(LOGGERS) | {"jsonl"} != set(get_args(RunLogger)):
    raise ImportError(f"LOGGERS {sorted(LOGGERS)} + jsonl != configs.schema.RunLogger {get_args(RunLogger)}")


class RunLoggers:
    """The loggers run.loggers names, fed together; one that fails is dropped with a warning."""

    def __init__(self, cfg: Config, path: Path):
        names = cfg.run.loggers
        if "jsonl" not in names:
            raise ConfigError("run.loggers must include jsonl: metrics.jsonl is the run directory's record "
                              "(plots and --resume read it); e.g. run.loggers=[jsonl,tensorboard]")
        self._loggers: List[Logger] = [LOGGERS[name](path, cfg) for name in dict.fromkeys(names) if name != "jsonl"]

    def log_step(self, step: int, metrics: dict) -> None:
        values = scalars(redact.redact(metrics))
        self._each(lambda logger: logger.log_step(step, values))

    def log_eval(self, stage: str, index: int, report: dict) -> None:
        """An eval's pass rates; one that scored no attempt (every one an infra error) has none,
        and logs nothing: its report says why, and the run goes on."""
        rates = {"pass_at_1": report["pass@1"], **{f"pass_at_{k}": v for k, v in (report.get("pass@k") or {}).items()}}
        values = {name: float(rate) for name, rate in rates.items() if rate is not None}
        if values:
            self._each(lambda logger: logger.log_eval(stage, index, values))

    def close(self) -> None:
        self._each(lambda logger: logger.close())
        self._loggers = []

    def _each(self, call) -> None:
        for logger in list(self._loggers):
            try:
                call(logger)
            except Exception as error:  # noqa: BLE001 - a logger must not end the run
                log.warning("logger %s failed and is dropped for the rest of the run: %s",
                            type(logger).__name__, error)
                self._loggers.remove(logger)
