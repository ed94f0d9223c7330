"""Plays a swerve/Harness-v0 episode: answers each of the harness's requests with the policy.

The env hands over each request (an observation); the player renders it token-exactly through
the trajectory's ChatSession, generates through the run's router (session affinity by the
episode's sticky key, the trajectory's age priority, weight updates interrupting and tagging
tokens as for any episode), and answers with an OpenAI completion (the action). Sampling is
always at the run's rollout temperature, so the behaviour log-probs stay the trainer's: a
request's own temperature is recorded, or refused under env.harness.temperature_mismatch=refuse.
A request's stop strings go to the engine, which ends generation at the first token whose text
holds one (no tokens past it are generated or trained); the session cuts the reply there.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from actors.episodes.trajectory import Trajectory, WorkItem
from configs.schema import HarnessConfig, RolloutConfig
from policies.chat.chat_session import ChatSession
from policies.chat.chat_tokenizer import IM_END
from policies.chat.conversation import ChatTokenizerLike
from policies.chat.openai_wire import ChatRequest, OpenAIError, completion_body
from policies.sample_types import SampleRequest, age_priority
from policies.seeds import derive_seed


@dataclass
class RequestBooks:
    """What the harness asked for that the run did not do as asked (reported per trajectory)."""
    temperatures: list = field(default_factory=list)
    refused: int = 0


class HarnessPlayer:
    def __init__(self, tokenizer: ChatTokenizerLike, harness: HarnessConfig, rollout: RolloutConfig, model: str,
                 max_context_tokens: int):
        self.tokenizer = tokenizer
        self.harness = harness
        self.rollout = rollout
        self.model = model
        self.max_context_tokens = min(max_context_tokens, rollout.max_total_tokens)
        self.stop_ids = (tokenizer.convert_tokens_to_ids(IM_END),)

    def play(self, env, info: dict, work: WorkItem, traj: Trajectory, engines, sticky_key: str) -> ChatSession:
        """Answer requests until the env ends the episode; fills traj's outcome and change."""
        chat = ChatSession(self.tokenizer, self.harness.history, self.max_context_tokens)
        try:
            self._play(env, info, work, traj, engines, sticky_key, chat)
        except BaseException:
            # An engine or sandbox failure ends the episode as infra_error: the harness still
            # runs in the lease and must be stopped before the next episode uses it.
            env.unwrapped.stop_harness()
            raise
        return chat

    def _play(self, env, info: dict, work: WorkItem, traj: Trajectory, engines, sticky_key: str,
              chat: ChatSession) -> None:
        books = RequestBooks()
        while True:
            request: ChatRequest = info["request"].request
            status, body = self.answer(request, chat, work, traj, engines, sticky_key, books)
            obs, reward, terminated, truncated, info = env.step(json.dumps({"status": status, "body": body}))
            traj.turns += 1
            if terminated or truncated:
                traj.record_end(reward, terminated, info, env.unwrapped.final_change)
                traj.harness = {key: info[key] for key in ("harness_exit_code", "harness_output", "requests", "refused")
                                if key in info}
                traj.harness.update(requested_temperatures=books.temperatures[:20], answered_with_error=books.refused,
                                    segments=len(chat.segments))
                return

    def answer(self, request: ChatRequest, chat: ChatSession, work: WorkItem, traj: Trajectory, engines,
               sticky_key: str, books: RequestBooks) -> tuple[int, dict]:
        try:
            return 200, self._complete(request, chat, work, traj, engines, sticky_key, books)
        except OpenAIError as error:
            books.refused += 1
            return error.status, error.body()

    def _complete(self, request: ChatRequest, chat: ChatSession, work: WorkItem, traj: Trajectory, engines,
                  sticky_key: str, books: RequestBooks) -> dict:
        if request.temperature is not None and request.temperature != self.rollout.temperature:
            if self.harness.temperature_mismatch == "refuse":
                raise OpenAIError(400, f"temperature {request.temperature:g} differs from the run's rollout temperature "
                                  f"{self.rollout.temperature:g}, and env.harness.temperature_mismatch=refuse",
                                  param="temperature")
            books.temperatures.append(request.temperature)
        prompt = chat.prompt(request)
        room = self.max_context_tokens - len(prompt)
        wanted = self.rollout.max_tokens_per_turn if request.max_tokens is None else request.max_tokens
        oldest = chat.current.oldest_version
        oldest = work.admitted_version if oldest is None else oldest
        seed = derive_seed(work.seed, chat.requests)
        if request.seed is not None:  # the harness's seed varies the draw, never fixes it across a group
            seed = derive_seed(seed, request.seed)
        out = engines.generate(SampleRequest(prompt, max(1, min(wanted, self.rollout.max_tokens_per_turn, room)),
                                             self.rollout.temperature, self.rollout.top_p, self.stop_ids,
                                             stop=tuple(request.stop), seed=seed,
                                             priority=age_priority(oldest, traj.started_s)), sticky_key)
        reply = chat.reply(out, request.stop, token_texts=request.logprobs)
        return completion_body(model=self.model, content=reply.content, tool_calls=reply.tool_calls,
                               finish_reason=reply.finish_reason, prompt_tokens=reply.prompt_tokens,
                               completion_tokens=reply.completion_tokens,
                               logprobs=reply.token_logprobs if request.logprobs else None,
                               fingerprint=f"weights-{max(out.versions, default=work.admitted_version)}")
