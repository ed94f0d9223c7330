"""One trajectory's chat with the policy, kept as token ids request by request (token-in, token-out).

An agent harness sends its whole history with every request. The session never re-encodes what
the policy sampled: when a request extends the previous one (the previous request's messages,
then the reply this session returned, then new messages), only the new messages are rendered by
the chat template and encoded (loss mask 0), and the next reply's sampled ids follow them
(mask 1, with the engine's log-probs and versions). A request that does not extend (history
compacted, reasoning dropped, a sub-agent starting over) either starts a new segment (`split`:
the trajectory then trains as several samples sharing its reward) or is refused (`strict`).

Messages are compared as the harness means them: tool-call arguments as parsed JSON, a missing
content as empty, ids of tool calls ignored (harnesses re-number them); roles, names, content,
reasoning and tool_call_id must match.

Per request the template renders the whole conversation once: the session keeps the text its
held tokens stand for, and where the rendering starts with it only the rest is encoded
(policies.chat.chat_render.continuation_after). Each segment keeps the messages its tokens hold.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, List, Literal, Optional, Sequence

from policies.chat.chat_render import NotIncremental, continuation_after, encode_text, render_text
from policies.chat.chat_tokenizer import IM_END
from policies.chat.conversation import PROMPT_LOGPROB, PROMPT_VERSION, ChatTokenizerLike
from policies.chat.openai_wire import ChatRequest, OpenAIError, context_length_error, split_tool_calls, template_messages
from policies.sample_types import FINISH_STOP, SampleOutput


@dataclass
class Segment:
    """One training sample's worth of a trajectory: a prompt, then replies and new messages."""
    # The messages its tokens hold: the harness's last request, then the reply it got.
    messages: List[dict] = field(default_factory=list)
    tools: Optional[list] = None
    token_ids: List[int] = field(default_factory=list)
    loss_mask: List[int] = field(default_factory=list)
    logprobs: List[float] = field(default_factory=list)
    versions: List[int] = field(default_factory=list)
    # The policy version of its oldest sampled token (None before the first reply): kept as
    # tokens arrive, so a request's age priority costs nothing however long the segment is.
    oldest_version: Optional[int] = None

    def add_context(self, ids: Sequence[int]) -> None:
        self.token_ids.extend(int(t) for t in ids)
        self.loss_mask.extend([0] * len(ids))
        self.logprobs.extend([PROMPT_LOGPROB] * len(ids))
        self.versions.extend([PROMPT_VERSION] * len(ids))

    def add_sampled(self, ids: Sequence[int], logprobs: Sequence[float], versions: Sequence[int]) -> None:
        self.token_ids.extend(int(t) for t in ids)
        self.loss_mask.extend([1] * len(ids))
        self.logprobs.extend(float(lp) for lp in logprobs)
        self.versions.extend(int(v) for v in versions)
        if len(versions):
            oldest = min(int(v) for v in versions)
            self.oldest_version = oldest if self.oldest_version is None else min(self.oldest_version, oldest)


@dataclass
class Reply:
    """What the session answers a request with, before the wire formats it."""
    content: Optional[str]
    tool_calls: List[dict]
    finish_reason: str  # "stop" | "length" (the wire says "tool_calls" when there are calls)
    prompt_tokens: int
    completion_tokens: int
    token_logprobs: List[tuple]  # (token text, logprob) of the returned tokens, when asked for


def _arguments(call: dict) -> Any:
    raw = call.get("function", {}).get("arguments", "")
    try:
        return json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return raw


def _meaning(message: dict) -> tuple:
    calls = tuple((c.get("function", {}).get("name"), json.dumps(_arguments(c), sort_keys=True))
                  for c in message.get("tool_calls") or ())
    return (message.get("role"), message.get("content") or "", message.get("name"), message.get("tool_call_id"),
            message.get("reasoning_content") or "", calls)


def same_history(given: Sequence[dict], kept: Sequence[dict]) -> bool:
    """Whether `given` starts with `kept`, message by message, as the harness means them."""
    # Equal dicts mean the same (most of a history comes back as it was sent): only the others are read.
    return len(given) >= len(kept) and all(a == b or _meaning(a) == _meaning(b) for a, b in zip(given, kept))


class ChatSession:
    def __init__(self, tokenizer: ChatTokenizerLike, history: Literal["split", "strict"], max_context_tokens: int):
        self._tokenizer = tokenizer
        self._history = history
        self._max_context_tokens = max_context_tokens
        self._im_end_id = tokenizer.convert_tokens_to_ids(IM_END)
        self.segments: List[Segment] = []
        # The current segment's messages as the template takes them (template_messages), and the
        # text its tokens stand for: kept so that a request converts and encodes only what is new.
        self._template_messages: List[dict] = []
        self._held_text = ""
        self.requests = 0

    @property
    def _messages(self) -> List[dict]:
        return self.segments[-1].messages if self.segments else []

    @property
    def _tools(self) -> Optional[list]:
        return self.segments[-1].tools if self.segments else None

    def transcript(self) -> List[dict]:
        """The conversation as the harness last sent it, and the reply it got."""
        return [dict(message) for message in self._messages]

    def segment_messages(self) -> List[List[dict]]:
        """Each segment's messages (the last one is `transcript()`), in the order of `segments`."""
        return [[dict(message) for message in segment.messages] for segment in self.segments]

    @property
    def current(self) -> Segment:
        return self.segments[-1]

    def prompt(self, request: ChatRequest) -> List[int]:
        """The ids to generate from for `request`; the session takes its new messages.

        Raises OpenAIError: a history rewrite under `strict`, or a prompt past the context."""
        messages = list(request.messages)
        if self.segments and request.tools == self._tools and same_history(messages, self._messages) \
                and len(messages) > len(self._messages):
            new = template_messages(messages[len(self._messages):])
            continued = self._continuation(new, request.tools)
            if continued is not None:
                ids, held_text = continued
                self._check_room(len(self.current.token_ids) + len(ids))
                self.current.add_context(ids)
                self.current.messages = messages
                self._template_messages = self._template_messages + new
                self._held_text = held_text
                self.requests += 1
                return list(self.current.token_ids)
        if self.segments and self._history == "strict":
            raise OpenAIError(400, "this request does not extend the session's history (the previous messages, "
                              "then the reply this session returned); env.harness.history=strict refuses it: "
                              "send the history unchanged, or run with env.harness.history=split",
                              param="messages", code="history_rewritten")
        rendered = template_messages(messages)
        text = render_text(self._tokenizer, rendered, request.tools, True)
        ids = encode_text(self._tokenizer, text)
        self._check_room(len(ids))
        segment = Segment(messages, request.tools)
        segment.add_context(ids)
        self.segments.append(segment)
        self._template_messages, self._held_text = rendered, text
        self.requests += 1
        return list(segment.token_ids)

    def _continuation(self, new: List[dict], tools: Optional[list]) -> Optional[tuple]:
        if self._messages[-1].get("role") != "assistant":
            return None  # the last request was never answered: its tokens end with no reply to extend
        try:
            return continuation_after(self._tokenizer, self._held_text, self._template_messages, new, tools)
        except NotIncremental:
            return None  # the template renders history differently once more follows: a new segment

    def _check_room(self, prompt_tokens: int) -> None:
        if prompt_tokens >= self._max_context_tokens:
            raise context_length_error(prompt_tokens, self._max_context_tokens)

    def reply(self, out: SampleOutput, stop: Sequence[str] = (), token_texts: bool = False) -> Reply:
        """Take the engine's sample for the last prompt; the assistant message the harness gets."""
        ids, logprobs, versions = list(out.token_ids), list(out.logprobs), list(out.versions)
        prompt_tokens = len(self.current.token_ids)
        stopped = out.finish_reason == FINISH_STOP
        cut = self._stop_at(ids, stop)
        if cut is not None:  # a stop string: the tokens after it were never the reply
            ids, logprobs, versions, stopped = ids[:cut], logprobs[:cut], versions[:cut], True
        self.current.add_sampled(ids, logprobs, versions)
        text_ids = ids[:-1] if ids and ids[-1] == self._im_end_id else ids
        if not ids or ids[-1] != self._im_end_id:
            # The turn must be closed for the template's next turn to follow it.
            self.current.add_context([self._im_end_id])
        text = self._tokenizer.decode(text_ids, skip_special_tokens=False)
        self._held_text += text + IM_END  # what the held tokens now stand for, closed turn included
        if cut is not None:
            text = min((text[:text.find(s)] for s in stop if s in text), key=len, default=text)
        content, tool_calls = split_tool_calls(text)
        message: dict = {"role": "assistant", "content": content}
        if tool_calls:
            message["tool_calls"] = tool_calls
        self.current.messages = self.current.messages + [message]
        self._template_messages = self._template_messages + template_messages([message])
        # Each token's own text only when the request asked for log-probs: decoding token by
        # token is most of a reply's cost otherwise.
        pieces = [self._tokenizer.decode([t], skip_special_tokens=False) for t in ids] if token_texts else []
        return Reply(content, tool_calls, "stop" if stopped else "length", prompt_tokens, len(ids),
                     list(zip(pieces, logprobs)))

    def _stop_at(self, ids: List[int], stop: Sequence[str]) -> Optional[int]:
        """The fewest leading ids whose text holds a stop string, None when none does."""
        if not stop or not any(s in self._tokenizer.decode(ids, skip_special_tokens=False) for s in stop):
            return None
        for k in range(1, len(ids) + 1):
            if any(s in self._tokenizer.decode(ids[:k], skip_special_tokens=False) for s in stop):
                return k
        return None
