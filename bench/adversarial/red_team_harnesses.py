"""The red team's harnesses: the env alone (`red_team.play`) and the episode actor a run uses
(`play_in_episode`); `play_red_team` plays the whole catalogue in both (`swerve bench reliability`).

`EpisodeHarness` is the plain EpisodeActor class (actors/fleet wraps it with ray.remote in one
place) with its lease a plain SandboxActor, as on Ray, and a `ScriptedRouter` where its
EngineRouter stands: each turn's reply is the next of a script, as a policy's tokens. So the
attempt travels the real path: tokens decoded into the reply, the env built by make_env from the
run's sections, the lease kept across episodes, failures classified by the actor (an exception
anywhere in the episode is infra_error there, never raised). `play_in_episode` reports what
`red_team.play` reports, with the honest episode (the gold fix) on the same actor and lease.
"""
from __future__ import annotations

import resource
from pathlib import Path
from typing import Dict, List, Sequence

from actors.episodes.episode_actor import EpisodeActor
from actors.episodes.sandbox_actor import SandboxActor
from actors.episodes.trajectory import Trajectory, WorkItem
from bench.adversarial.red_team import CATALOGUE, RedTeamAttempt, judged, opened, play, tally
from bench.adversarial.red_team_targets import Target, image_engine, targets
from configs.schema import EnvConfig, RolloutConfig, SandboxConfig
from envs.swe_env import SWEEnv
from policies.chat.chat_tokenizer import IM_END, load_chat_tokenizer
from policies.sample_types import FINISH_STOP, SampleOutput

# Turns an episode may take: the longest script (an attempt's commands, then submit) must fit.
MAX_TURNS = 16
# A reply is a whole command (the longest, a gold patch or appended code, is ~200 tokens here).
MAX_TOKENS_PER_TURN = 8192
# Observations join the context each turn; nothing is sampled, so no model bounds the context.
MAX_TOTAL_TOKENS = 1_000_000
# Some attempts run for minutes (hundreds of thousands of files); the actor's time cap must not cut
# one short of its submit (the attempt would then go ungraded and prove nothing).
MAX_EPISODE_S = 3600.0
# Log-prob reported for each scripted token (nothing is sampled; only a number is needed).
SCRIPTED_LOGPROB = -0.5


def _byte_alphabet() -> Dict[int, str]:
    """GPT-2's byte-level alphabet (the ByteLevel pre-tokenizer's): printable bytes stand for
    themselves, the others for characters past 255, in byte order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in kept]
    return {**{b: chr(b) for b in kept}, **{b: chr(256 + n) for n, b in enumerate(shifted)}}


class ScriptedRouter:
    """Stands where the episode actor's EngineRouter stands (generate, release): every generate
    answers the next reply of the script it was handed."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.im_end = tokenizer.convert_tokens_to_ids(IM_END)
        self.replies: List[str] = []

    def script(self, replies: Sequence[str]) -> None:
        self.replies = list(replies)

    def reply_ids(self, text: str) -> List[int]:
        """The reply's tokens. Text holding lone surrogates has no UTF-8 form the tokenizer takes:
        it goes as one byte-level token per byte of its surrogate-passing encoding, which is what a
        policy can emit (the decoded reply then holds U+FFFD where the surrogate was)."""
        if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
            alphabet = _byte_alphabet()
            return [self.tokenizer.convert_tokens_to_ids(alphabet[b]) for b in text.encode("utf-8", "surrogatepass")]
        ids = self.tokenizer.encode(text)
        if self.tokenizer.decode(ids) != text:
            raise ValueError(f"the tokenizer does not carry this reply unchanged: {text[:80]!r}")
        return ids

    def generate(self, request, sticky_key: str) -> SampleOutput:
        if not self.replies:
            raise RuntimeError("the script has no reply left for this turn")
        ids = self.reply_ids(self.replies.pop(0)) + [self.im_end]
        if len(ids) > request.max_new_tokens:
            raise ValueError(f"a scripted reply of {len(ids)} tokens exceeds the turn's {request.max_new_tokens}")
        return SampleOutput(ids, [SCRIPTED_LOGPROB] * len(ids), [0] * len(ids), FINISH_STOP)

    def release(self, sticky_key: str) -> None:
        """Nothing is sticky: one scripted engine."""


class EpisodeHarness:
    """One episode actor and its lease (sandbox_cfg: the run's sandbox section), reused across
    episodes as a run's are."""

    def __init__(self, tokenizer_path: str, sandbox_cfg: SandboxConfig):
        self.engines = ScriptedRouter(load_chat_tokenizer(tokenizer_path))
        self.lease = SandboxActor(0, sandbox_cfg)
        rollout = RolloutConfig(max_turns=MAX_TURNS, max_tokens_per_turn=MAX_TOKENS_PER_TURN,
                                max_total_tokens=MAX_TOTAL_TOKENS, max_episode_seconds=MAX_EPISODE_S)
        self.actor = EpisodeActor(0, rollout, EnvConfig(), sandbox_cfg, tokenizer_path, self.engines, None, self.lease)
        self.episodes = 0

    def episode(self, target: Target, commands: Sequence[str]) -> Trajectory:
        """The commands, one a turn, then submit; raises when the episode ended before submit."""
        replies = [f"```bash\n{command}\n```" for command in (*commands, "submit")]
        if len(replies) > MAX_TURNS:
            raise ValueError(f"{len(replies)} replies exceed the harness's {MAX_TURNS} turns")
        self.engines.script(replies)
        self.episodes += 1
        work = WorkItem(target.task, target.task.id, group_id=self.episodes, member=0, attempt=0, admitted_version=0,
                        seed=self.episodes)
        traj = self.actor.run_episode(work)
        if self.engines.replies and not traj.is_infra_error:
            raise RuntimeError(f"the episode ended ({traj.outcome}) with {len(self.engines.replies)} replies unplayed")
        return traj

    def close(self) -> None:
        self.actor.env.close()
        self.lease.close()


def play_in_episode(attempt: RedTeamAttempt, target: Target, harness: EpisodeHarness) -> Dict:
    """The attempt, then the honest episode, through the harness's actor; `play`'s fields. An
    infra_error trajectory is `outcome` infra_error with its `error`; `raised` is what escaped."""
    found = opened(attempt, target, "episode")
    try:
        traj = harness.episode(target, attempt.commands(target))
        found.update(reward=traj.reward, outcome=traj.outcome, tampered=dict(traj.tampered),
                     unresolved_reason=traj.unresolved_reason, error=traj.error, turns=traj.turns,
                     episode_s=round(traj.finished_s - traj.started_s, 2))
        found["honest_after"] = harness.episode(target, (target.fix_command,)).reward == 1.0
    except Exception as error:  # noqa: BLE001 - what the machinery raised is what this bench reports
        found["raised"] = f"{type(error).__name__}: {str(error)[:500]}"
        found.setdefault("reward", 0.0)
        found["honest_after"] = False
    return judged(found)


def play_alone(attempt: RedTeamAttempt, target: Target, harness: str, work_dir: str, tokenizer_path: str) -> Dict:
    """The attempt in a fresh harness of its own ("env" or "episode"), closed after; leases under
    `work_dir`."""
    if harness == "env":
        env, lease = SWEEnv(sandbox=target.sandbox_config(work_dir)), target.lease(work_dir)
        try:
            return play(attempt, env, target, lease)
        finally:
            env.close()
            if lease is not None:
                lease.close()
    episodes = EpisodeHarness(tokenizer_path, target.sandbox_config(work_dir))
    try:
        return play_in_episode(attempt, target, episodes)
    finally:
        episodes.close()


def play_red_team(work_dir: str, tokenizer_path: str) -> Dict:
    """Every attempt on every target it applies to, in both harnesses: a plain SWEEnv and the
    episode actor (its tokenizer at `tokenizer_path`). The image target is played where a Docker
    engine answers or can be started here; `red_team_skipped` says why not elsewhere."""
    played, skipped = [], {}
    with image_engine() as image_reason:
        for target in targets(Path(work_dir)).values():
            if target.format == "image" and image_reason is not None:
                skipped["image"] = image_reason
                continue
            attempts = [a for a in CATALOGUE if target.format in a.formats]
            env, lease = SWEEnv(sandbox=target.sandbox_config(work_dir)), target.lease(work_dir)
            try:
                played += [play(a, env, target, lease) for a in attempts]
            finally:
                env.close()
                if lease is not None:
                    lease.close()
            harness = EpisodeHarness(tokenizer_path, target.sandbox_config(work_dir))
            try:
                played += [play_in_episode(a, target, harness) for a in attempts]
            finally:
                harness.close()
    return {**tally(played), "red_team_skipped": skipped,
            # What grading cost the host: the slowest submit, and this process's peak memory (the
            # listing, capture and grading side; the sandbox's processes are bounded by its rlimits).
            "red_team_submit_s_max": max((p.get("submit_s") or 0.0 for p in played), default=0.0),
            "red_team_submit_cpu_s_max": max((p.get("submit_cpu_s") or 0.0 for p in played), default=0.0),
            "red_team_host_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "red_team_attempts": played}
