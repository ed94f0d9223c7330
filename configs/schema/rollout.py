"""Episodes and the sample collector."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass
class RolloutConfig:
    # "async": episodes run while the trainer steps (samples up to max_staleness versions old);
    # "sync": as max_staleness=0, each batch is sampled by the policy it trains.
    mode: Literal["async", "sync"] = "async"
    max_staleness: int = 1
    # What max_staleness counts: "trajectory" (a trajectory whose oldest generated token is more
    # than max_staleness versions behind the batch is dropped whole, and the trainer waits for
    # work at that edge) | "token" (the trainer never waits for a straggler; each generated token
    # more than max_staleness behind is masked out of the loss, a trajectory left with none is
    # dropped). "trajectory" stays the default until `swerve bench async_vs_sync` shows "token"
    # wins on both throughput and learning (issue 42).
    staleness_unit: Literal["trajectory", "token"] = "trajectory"
    num_episode_actors: int = 4
    group_size: int = 4
    groups_per_batch: int = 2
    temperature: float = 1.0
    top_p: float = 1.0
    max_turns: int = 4
    max_tokens_per_turn: int = 48
    max_total_tokens: int = 2048
    max_episode_seconds: float = 300.0
    # At the end of a run, how long episodes still running may finish (their results are counted)
    # before their actors are ended.
    shutdown_grace_s: float = 300.0
    max_infra_retries: int = 2
    normalize_advantage_std: bool = False
    # Dynamic sampling: drop complete groups whose members all got the same reward (zero
    # advantage, no learning signal) and admit new ones in their place, so every batch holds
    # `groups_per_batch` groups with mixed rewards. Counted as `filtered_uniform`.
    drop_uniform_groups: bool = False
    # Which task the collector admits next (actors/training/task_picker.py): "uniform" (a shuffled pass
    # over every task) | "pass_rate" (the task whose decayed success estimate is nearest 0.5, so
    # groups have mixed rewards; unseen tasks keep being explored).
    task_selection: Literal["uniform", "pass_rate"] = "uniform"
    # pass_rate: evidence about a task halves in weight every this many policy versions.
    pass_rate_half_life_versions: float = 4.0
    # pass_rate: share of admissions that go to a task not seen yet, whatever the estimates say.
    explore_fraction: float = 0.1
    # train_pass_rate (metric) is the mean reward of this many most recent scored trajectories.
    pass_rate_window: int = 128
    # How long an idle episode actor waits before asking the collector again.
    poll_interval_s: float = 0.05
