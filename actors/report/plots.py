"""PNG plots of a run from its metrics rows: what an operator looks at first."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402

TIME_PARTS = ("time_rollout_wait_s", "time_logprob_s", "time_actor_update_s", "time_weight_sync_s")
OUTCOMES = ("resolved_rate", "truncated_rate", "format_error_rate", "infra_error_rate")


def _series(rows: Sequence[dict], name: str) -> list[float]:
    return [float(r[name]) if r.get(name) is not None else float("nan") for r in rows]


def write_plots(rows: Sequence[dict], out_dir: Path) -> list[Path]:
    """Five PNGs in out_dir; returns their paths. rows: metrics.jsonl objects, one per step."""
    out_dir.mkdir(parents=True, exist_ok=True)
    steps = [r["step"] for r in rows]
    paths = []

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, _series(rows, "resolved_rate"), marker="o", label="resolved rate")
    ax.plot(steps, _series(rows, "reward_mean"), marker="s", label="reward mean (trained)")
    # On a stream every task is new, so both are live held-out estimates; the curriculum prefers
    # kinds near a 1/2 pass rate, so only the groups admitted at random measure the whole task mix.
    ax.plot(steps, _series(rows, "train_pass_rate"), marker="^", label="train pass rate (running)")
    ax.plot(steps, _series(rows, "pass_rate_at_random"), marker="v", label="pass rate, admitted at random")
    ax.set(xlabel="step", ylabel="rate", ylim=(-0.05, 1.05), title="Resolved rate and reward")
    ax.legend()
    paths.append(_save(fig, out_dir / "reward.png"))

    fig, ax = plt.subplots(figsize=(6, 3.5))
    bottom = [0.0] * len(rows)
    for part in TIME_PARTS:
        values = [0.0 if v != v else v for v in _series(rows, part)]  # NaN -> 0 for stacking
        ax.bar(steps, values, bottom=bottom, label=part.removeprefix("time_").removesuffix("_s"))
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.plot(steps, _series(rows, "step_time_s"), color="black", marker=".", label="step time")
    ax.set(xlabel="step", ylabel="seconds", title="Step time breakdown")
    ax.legend(fontsize="small")
    paths.append(_save(fig, out_dir / "step_time.png"))

    fig, ax = plt.subplots(figsize=(6, 3.5))
    counts: dict[int, int] = {}
    for r in rows:
        for staleness, n in (r.get("staleness_hist") or {}).items():
            counts[int(staleness)] = counts.get(int(staleness), 0) + n
    ax.bar(list(counts), list(counts.values()))
    ax.set(xlabel="versions behind at training time (oldest token)", ylabel="trajectories",
           title="Staleness of trained trajectories")
    paths.append(_save(fig, out_dir / "staleness.png"))

    fig, ax = plt.subplots(figsize=(6, 3.5))
    bottom = [0.0] * len(rows)
    for name in OUTCOMES:
        values = [0.0 if v != v else v for v in _series(rows, name)]
        ax.bar(steps, values, bottom=bottom, label=name.removesuffix("_rate"))
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set(xlabel="step", ylabel="share of finished trajectories", ylim=(0, 1.05), title="Outcome mix")
    ax.legend(fontsize="small")
    paths.append(_save(fig, out_dir / "outcomes.png"))
    paths.append(_learning_plot(rows, steps, out_dir / "learning.png"))
    return paths


# Per optimizer step: is RL learning, and is it sound? (README, "Is it learning?")
LEARNING_PANELS = (
    ("train pass rate / informative groups", ("train_pass_rate", "informative_group_fraction")),
    ("entropy (nats/token)", ("entropy_mean",)),
    ("trainer vs engine", ("logprob_mismatch_mean", "mismatch_kl", "behavior_kl")),
    ("PPO", ("ratio_mean", "ratio_max", "clip_fraction")),
    ("gradients and advantages", ("grad_norm", "advantage_std")),
)


def _learning_plot(rows: Sequence[dict], steps: list, path: Path) -> Path:
    fig, axes = plt.subplots(len(LEARNING_PANELS), 1, figsize=(6, 2.2 * len(LEARNING_PANELS)), sharex=True)
    for ax, (title, names) in zip(axes, LEARNING_PANELS):
        for name in names:
            ax.plot(steps, _series(rows, name), marker=".", label=name)
        ax.set_title(title, fontsize="small")
        ax.legend(fontsize="x-small")
    axes[-1].set_xlabel("step")
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
