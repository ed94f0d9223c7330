"""What a run writes under runs/<run.name>/ (the contract: docs/contracts.md, "Run directory").

Everything written goes through `write_text_atomic`, `write_json` or `write_jsonl`, which blank
secrets (actors/report/redact.py): a key in the config or in a command's output never reaches a file.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from actors.report import redact
from actors.report.loggers import RunLoggers
from configs import Config, to_yaml

METRIC_NAMES = (
    "step", "step_time_s", "time_actor_update_s", "time_rollout_wait_s", "time_logprob_s",
    "time_weight_sync_s", "policy_version", "staleness_mean", "staleness_max", "stale_token_fraction", "reward_mean",
    "resolved_rate", "truncated_rate", "format_error_rate", "infra_error_rate", "infra_error_by_source",
    "tamper_rate",
    "rollout_traj_per_hour", "tail_fraction", "turns_mean", "tokens_mean", "tokens_trained",
    "tokens_generated_trained", "tokens_generated_finished", "segments_mean", "sandbox_start_p50_s",
    "engine_kv_usage_max", "engine_busy_fraction", "admitted", "in_flight", "buffered", "dropped_stale", "infra_excluded",
    "quarantined", "filtered_uniform",
    # Is RL learning? (README, "Is it learning?")
    "entropy_mean", "logprob_mismatch_mean", "mismatch_kl", "behavior_kl", "ratio_mean", "ratio_max",
    "clip_fraction", "tis_mean", "grad_norm", "lr", "advantage_std", "informative_group_fraction",
    "train_pass_rate", "pass_rate_at_random",
    # Is the run safe? (README, "Restarts")
    "time_checkpoint_s", "checkpoint_overhead_fraction", "restarts_collector", "restarts_trainer",
    "restarts_engine", "restarts_episode", "restarts_run",
)


def write_text_atomic(path: Path, text: str) -> None:
    """`text`, secrets blanked, replaces `path` at once (readers never see half a file)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(redact.redact_text(text))
    os.replace(tmp, path)


def write_json(path: Path, obj) -> None:
    """`obj` as indented JSON, secrets blanked (also strings under secret-named keys)."""
    write_text_atomic(path, json.dumps(redact.redact(obj), indent=2) + "\n")


def write_jsonl(path: Path, rows, mode: str = "w") -> None:
    """Rows as JSONL, secrets blanked; mode "a" appends."""
    values = redact.secret_values()
    with path.open(mode) as f:
        for row in rows:
            f.write(json.dumps(redact.redact(row, values)) + "\n")


class RunDir:
    def __init__(self, cfg: Config):
        self.path = cfg.run.path
        self.checkpoints = self.path / "checkpoints"
        # The run's outputs start here: from now on its logs and prints are redacted too.
        redact.install()
        (self.path / "trajectories").mkdir(parents=True, exist_ok=True)
        # Field-wise first (a secret-named field is blanked whatever its value), then as text.
        write_text_atomic(self.path / "config.yaml", to_yaml(redact.redact(cfg)))
        self.metrics_path = self.path / "metrics.jsonl"
        self.events_path = self.path / "events.jsonl"
        if not cfg.run.resume:
            self.metrics_path.write_text("")
            self.events_path.write_text("")
        # TensorBoard / W&B beside metrics.jsonl (run.loggers); close() ends them.
        self.loggers = RunLoggers(cfg, self.path)

    def rows(self) -> list[dict]:
        if not self.metrics_path.exists():
            return []
        return [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line.strip()]

    def keep_rows_through(self, step: int) -> None:
        """On resume: steps after the checkpoint are redone, so their old rows go."""
        kept = [r for r in self.rows() if r["step"] <= step]
        write_text_atomic(self.metrics_path, "".join(json.dumps(r) + "\n" for r in kept))

    def write_metrics(self, metrics: dict) -> None:
        missing = [name for name in METRIC_NAMES if name not in metrics]
        if missing:
            raise KeyError(f"metrics row lacks contract names {missing}")
        write_jsonl(self.metrics_path, [metrics], mode="a")
        self.loggers.log_step(metrics["step"], metrics)

    def close(self) -> None:
        self.loggers.close()

    def __enter__(self) -> "RunDir":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def record_event(self, event: str, **fields) -> None:
        """One line of the run's life in events.jsonl (`start`, `resume`, `done`, with the step and
        version; `rollback`, with the failed role and the cause): what scripts and checks read, so that the console's wording stays free to change."""
        write_jsonl(self.events_path, [{"event": event, "time": round(time.time(), 3), **fields}], mode="a")

    def events(self) -> list[dict]:
        if not self.events_path.exists():
            return []
        return [json.loads(line) for line in self.events_path.read_text().splitlines() if line.strip()]

    def write_accounting(self, accounting: dict) -> None:
        write_json(self.path / "accounting.json", accounting)

    def write_trajectories(self, step: int, summaries: list[dict]) -> None:
        write_jsonl(self.path / "trajectories" / f"step_{step:06d}.jsonl", summaries)
