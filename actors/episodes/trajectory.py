"""Records that travel between actors: work items, trajectories, training samples and batches."""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, Iterable, Optional, Sequence

from envs.outcomes import Outcome
from policies.sample_types import TrainSample  # the trainer's input, defined where policies/ can use it


# What a work source (the collector, the eval queue) answers an episode actor when the run has ended.
STOP = "stop"


def oldest_version(versions: list[int], loss_mask: list[int], admitted_version: int) -> int:
    """Policy version of the oldest generated token (mask 1); admitted_version when none was."""
    return min((v for v, m in zip(versions, loss_mask) if m), default=admitted_version)


@dataclass(frozen=True)
class WorkItem:
    task: Any  # an envs.tasks.task.Task (or whatever the configured env takes as options["task"])
    task_id: str
    group_id: int
    member: int
    attempt: int  # 0 for the first run; infra retries count up
    admitted_version: int
    seed: int


@dataclass
class Trajectory:
    group_id: int
    member: int
    attempt: int
    task_id: str
    admitted_version: int
    outcome: str
    reward: float = 0.0
    infra_source: Optional[str] = None
    error: str = ""
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    turns: int = 0
    started_s: float = 0.0
    finished_s: float = 0.0
    sandbox_start_s: Optional[float] = None
    # The conversation; for swerve/Harness-v0 its last segment's (what the harness last sent, and the reply).
    messages: list[dict] = field(default_factory=list)
    # The attempt's final workspace change as a unified diff (SWE-bench `model_patch`); "" when
    # the env reports none.
    model_patch: str = ""
    # Protected paths the attempt changed -> why (envs/grading/protection.py); non-empty: it tampered.
    tampered: dict[str, str] = field(default_factory=dict)
    # Why an unresolved attempt was not graded by its tests (what it left beyond env.swe's bounds,
    # a clash with the graded view, a reset it defeated); "" when its tests decided.
    unresolved_reason: str = ""
    # The grader's verdict test by test (node id -> PASSED, FAILED, ...) and on the hidden cases
    # (label -> PASSED or "FAILED (why)"); empty when nothing was graded.
    test_status: dict[str, str] = field(default_factory=dict)
    hidden_status: dict[str, str] = field(default_factory=dict)
    # Why the grader could not trust the tests' report (missing, contradicting the exit code, timed out).
    grading_problems: list[str] = field(default_factory=list)
    # Where each training sample of the trajectory starts in token_ids (swerve/Harness-v0: a
    # request that rewrote the history started a new segment); [0] or empty: one sample.
    segment_starts: list[int] = field(default_factory=list)
    # swerve/Harness-v0: each segment's messages and the tools its requests offered, aligned with
    # segment_starts (the last segment's messages are `messages`); empty for other envs.
    segment_messages: list[list[dict]] = field(default_factory=list)
    segment_tools: list[Optional[list[dict]]] = field(default_factory=list)
    # swerve/Harness-v0: the harness's exit code, output tail, requests and what was not done as asked.
    harness: dict = field(default_factory=dict)

    def record_end(self, reward: float, terminated: bool, info: dict, final_change) -> None:
        """The episode's last step: reward, outcome, and the workspace's change from the step's
        info, or from `final_change()` (a cap ended it, or the env reports none in info)."""
        self.reward = float(reward)
        self.outcome = info["outcome"] if terminated else Outcome.TRUNCATED.value
        if "model_patch" in info:
            self.model_patch, self.tampered = info["model_patch"], dict(info.get("tampered", {}))
            self.unresolved_reason = info.get("unresolved_reason", "")
            self.test_status, self.hidden_status = dict(info.get("test_status", {})), dict(info.get("hidden_status", {}))
            self.grading_problems = list(info.get("grading_problems", []))
        else:
            self.model_patch, self.tampered = final_change()

    def samples(self, advantage: float) -> list[TrainSample]:
        """The trajectory as training samples, one per segment, each with the group's advantage."""
        bounds = [*(self.segment_starts or [0]), len(self.token_ids)]
        return [TrainSample(self.token_ids[a:b], self.loss_mask[a:b], self.logprobs[a:b], advantage,
                            self.versions[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a]

    @property
    def is_infra_error(self) -> bool:
        return self.outcome == Outcome.INFRA_ERROR.value

    @property
    def num_generated(self) -> int:
        return sum(self.loss_mask)

    @property
    def oldest_version(self) -> int:
        """Version of the oldest generated token; the admission version when none was generated."""
        return oldest_version(self.versions, self.loss_mask, self.admitted_version)

    def summary(self) -> dict:
        """The attempt as the run directory keeps it (a step's trajectories, an eval's attempts):
        what it did, how it was graded and when, without its tokens (`token_record`)."""
        return {
            "task_id": self.task_id,
            "group_id": self.group_id,
            "member": self.member,
            "attempt": self.attempt,
            "outcome": self.outcome,
            "infra_source": self.infra_source,
            "reward": self.reward,
            "turns": self.turns,
            "generated_tokens": self.num_generated,
            "admitted_version": self.admitted_version,
            "versions": sorted(set(v for v, m in zip(self.versions, self.loss_mask) if m)),
            "started_s": self.started_s,
            "finished_s": self.finished_s,
            "sandbox_start_s": self.sandbox_start_s,
            "error": self.error,
            "tampered": dict(self.tampered),
            "unresolved_reason": self.unresolved_reason,
            "test_status": dict(self.test_status),
            "hidden_status": dict(self.hidden_status),
            "grading_problems": list(self.grading_problems),
            "model_patch": self.model_patch,
            "segments": max(1, len(self.segment_starts)),
            **({"harness": self.harness} if self.harness else {}),
            "messages": self.messages,
            **({"segment_messages": self.segment_messages, "segment_tools": self.segment_tools}
               if self.segment_messages else {}),
        }


    def token_record(self, trained_mask: Sequence[int]) -> dict:
        """The generated tokens as a step's record keeps them (what `swerve view` colours): their
        ids, each reply's length, and as runs ([value, count], they change rarely) the policy
        version each was generated under and whether the update trained it (0: masked as stale).
        The prompt's and observations' tokens stay out: their text is in `messages`, redacted."""
        generated = [i for i, m in enumerate(self.loss_mask) if m]
        replies = [sum(1 for _ in run) for generated_run, run in groupby(self.loss_mask) if generated_run]
        return {"ids": [self.token_ids[i] for i in generated], "replies": replies,
                "versions": runs(self.versions[i] for i in generated),
                "trained": runs(trained_mask[i] for i in generated)}


def runs(values: Iterable[int]) -> list[list[int]]:
    """[[value, count], ...]: consecutive equal values as one run."""
    return [[value, sum(1 for _ in run)] for value, run in groupby(values)]


@dataclass
class Batch:
    version: int  # the policy version these samples are trained from
    samples: list[TrainSample]
    trajectories: list[Trajectory]
    temperature: float
    stats: dict = field(default_factory=dict)
    # Aligned with `trajectories`: each one's advantage and which of its tokens this update trains.
    advantages: list[float] = field(default_factory=list)
    trained_masks: list[list[int]] = field(default_factory=list)

    def trajectory_rows(self, limit: int) -> list[dict]:
        """The first `limit` trajectories as the step's record (trajectories/step_*.jsonl): each
        one's summary, what training made of it (the version it was trained from, its advantage and
        staleness) and its generated tokens."""
        return [{**traj.summary(), "trained_version": self.version, "advantage": advantage,
                 "staleness": self.version - traj.oldest_version, "tokens": traj.token_record(mask)}
                for traj, advantage, mask in zip(self.trajectories[:limit], self.advantages, self.trained_masks)]

    @property
    def num_loss_tokens(self) -> int:
        return sum(sum(s.loss_mask) for s in self.samples)


class WorkSource:
    """What an episode actor asks of the collector (training) or the eval queue: acquire(worker)
    -> WorkItem | None (nothing now) | "stop", and submit(trajectory). `exchange` is both in
    one call: one round trip per episode when the source is a Ray actor."""

    def exchange(self, traj: Trajectory, worker: str = ""):
        self.submit(traj)
        return self.acquire(worker)
