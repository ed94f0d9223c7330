"""What a run writes under runs/<run.name>/ (the DESIGN.md contract)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from configs import Config, to_yaml

METRIC_NAMES = (
    "step", "step_time_s", "time_actor_update_s", "time_rollout_wait_s", "time_logprob_s",
    "time_weight_sync_s", "policy_version", "staleness_mean", "staleness_max", "reward_mean",
    "resolved_rate", "truncated_rate", "format_error_rate", "infra_error_rate", "infra_error_by_source",
    "rollout_traj_per_hour", "tail_fraction", "turns_mean", "tokens_mean", "sandbox_start_p50_s",
    "engine_kv_usage_max", "admitted", "in_flight", "buffered", "dropped_stale", "infra_excluded",
    "quarantined", "filtered_uniform",
)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class RunDir:
    def __init__(self, cfg: Config):
        self.path = Path(cfg.run.dir).expanduser().resolve() / cfg.run.name
        self.checkpoints = self.path / "checkpoints"
        (self.path / "trajectories").mkdir(parents=True, exist_ok=True)
        _write_atomic(self.path / "config.yaml", to_yaml(cfg))
        self.metrics_path = self.path / "metrics.jsonl"
        if not cfg.run.resume:
            self.metrics_path.write_text("")

    def rows(self) -> list[dict]:
        if not self.metrics_path.exists():
            return []
        return [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line.strip()]

    def keep_rows_through(self, step: int) -> None:
        """On resume: steps after the checkpoint are redone, so their old rows go."""
        kept = [r for r in self.rows() if r["step"] <= step]
        _write_atomic(self.metrics_path, "".join(json.dumps(r) + "\n" for r in kept))

    def write_metrics(self, metrics: dict) -> None:
        missing = [name for name in METRIC_NAMES if name not in metrics]
        if missing:
            raise KeyError(f"metrics row lacks contract names {missing}")
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(metrics) + "\n")

    def write_accounting(self, accounting: dict) -> None:
        _write_atomic(self.path / "accounting.json", json.dumps(accounting, indent=2) + "\n")

    def write_trajectories(self, step: int, summaries: list[dict]) -> None:
        with (self.path / "trajectories" / f"step_{step:06d}.jsonl").open("w") as f:
            for summary in summaries:
                f.write(json.dumps(summary) + "\n")
