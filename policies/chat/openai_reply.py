"""What goes back to an OpenAI client (policies/chat/openai_wire.py re-exports all of it): errors in
OpenAI's shape, a reply's tool calls parsed from the policy's text (Qwen3's `<tool_call>` JSON
blocks), `chat.completion` bodies and the same completion as a server-sent-event stream.

Pure: no aiohttp, Ray or envs.
"""
from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

FINISH_REASONS = ("stop", "length")
# One Qwen3-style tool call: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_DONE = b"data: [DONE]\n\n"


class OpenAIError(Exception):
    """An error answered as OpenAI does: HTTP `status` and `body()`."""

    def __init__(self, status: int, message: str, *, param: Optional[str] = None, code: Optional[str] = None,
                 type: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type

    def body(self) -> Dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def context_length_error(prompt_tokens: int, max_context_tokens: int) -> OpenAIError:
    # The opening sentence and the code are what the openai client and litellm (its
    # ContextWindowExceededError) recognise, so a harness stops instead of retrying.
    return OpenAIError(
        400, f"This model's maximum context length is {max_context_tokens} tokens. However, your messages "
        f"resulted in {prompt_tokens} tokens, which leaves no room for a reply (at most "
        f"{max_context_tokens - 1} prompt tokens). Please reduce the length of the messages.",
        param="messages", code="context_length_exceeded")


def not_found_error(path: str) -> OpenAIError:
    return OpenAIError(404, f"{path} is not served: the OpenAI routes here are POST .../v1/chat/completions and "
                       "GET .../v1/models (/v1/completions, /v1/responses and the others are not)",
                       type="not_found_error", code="unknown_url")


def model_object(model_id: str, max_model_len: int, created: int) -> Dict[str, Any]:
    """One OpenAI `model` object: what GET /v1/models lists and GET /v1/models/<id> answers."""
    return {"id": model_id, "object": "model", "created": created, "owned_by": "swerve", "root": model_id,
            "max_model_len": max_model_len}


def models_body(model_id: str, max_model_len: int, created: int) -> Dict[str, Any]:
    return {"object": "list", "data": [model_object(model_id, max_model_len, created)]}


def model_not_found_error(model_id: str, served: str) -> OpenAIError:
    # OpenAI's wording and code for GET /v1/models/<unknown id>; `served` names the one that is.
    return OpenAIError(404, f"The model `{model_id}` does not exist: this server serves `{served}` "
                       "(GET /v1/models lists it)", param="model", code="model_not_found")


def split_tool_calls(text: str) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    """(content outside the tool-call blocks or None, OpenAI tool_calls). A block that is not a JSON
    object with a string name and object arguments stays in the content: it is the policy's output."""
    calls, pieces, last = [], [], 0
    for match in _TOOL_CALL.finditer(text):
        call = _tool_call(match.group(1))
        if call is None:
            continue
        pieces.append(text[last:match.start()])
        last = match.end()
        calls.append(call)
    if not calls:
        return text or None, []
    # The template writes the content, then each call on lines of its own: that whitespace is not content.
    content = "".join(pieces + [text[last:]]).strip()
    return content or None, calls


def _tool_call(block: str) -> Optional[Dict[str, Any]]:
    try:
        parsed = json.loads(block)
    except ValueError:
        return None
    if (not isinstance(parsed, dict) or not isinstance(parsed.get("name"), str) or not parsed["name"]
            or not isinstance(parsed.get("arguments"), dict)):
        return None
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": parsed["name"], "arguments": json.dumps(parsed["arguments"], ensure_ascii=False)}}


def completion_body(*, model: str, content: Optional[str], tool_calls: List[Dict[str, Any]], finish_reason: str,
                    prompt_tokens: int, completion_tokens: int, logprobs: Optional[Sequence[Tuple[str, float]]],
                    fingerprint: str) -> Dict[str, Any]:
    """One `chat.completion`; finish_reason becomes "tool_calls" when the reply calls tools."""
    if finish_reason not in FINISH_REASONS:
        raise ValueError(f"finish_reason must be one of {FINISH_REASONS}, got {finish_reason!r}")
    message: Dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
        "model": model, "system_fingerprint": fingerprint,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else finish_reason,
                     "logprobs": None if logprobs is None else logprobs_content(logprobs)}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


class StreamChunks:
    """The SSE events of one streamed completion, OpenAI's shape: `chat.completion.chunk` objects sharing
    one id, each `choices[0].delta` a piece of the reply, then the usage (when asked) and [DONE]."""

    def __init__(self, *, model: str, fingerprint: str, include_usage: bool, completion_id: Optional[str] = None,
                 created: Optional[int] = None):
        self.head = {"id": completion_id or f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
                     "created": int(time.time()) if created is None else created, "model": model,
                     "system_fingerprint": fingerprint}
        self.include_usage = include_usage

    def chunk(self, delta: Dict[str, Any], finish_reason: Optional[str] = None,
              logprobs: Optional[Dict[str, Any]] = None) -> bytes:
        event: Dict[str, Any] = {**self.head, "choices": [{"index": 0, "delta": delta, "logprobs": logprobs,
                                                           "finish_reason": finish_reason}]}
        if self.include_usage:
            event["usage"] = None  # as OpenAI: only the last chunk carries it
        return _event(event)

    def tool_calls(self, calls: Sequence[Dict[str, Any]], first_logprobs: Optional[Dict[str, Any]] = None) -> List[bytes]:
        """Each call as OpenAI streams it: its id and name, then its arguments."""
        events = []
        for index, call in enumerate(calls):
            events.append(self.chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                                      "function": {"name": call["function"]["name"],
                                                                   "arguments": ""}}]},
                                     logprobs=first_logprobs if index == 0 else None))
            events.append(self.chunk({"tool_calls": [{"index": index, "function": {
                "arguments": call["function"]["arguments"]}}]}))
        return events

    def end(self, usage: Optional[Dict[str, Any]]) -> List[bytes]:
        """The usage chunk (when asked) and [DONE]."""
        events = []
        if self.include_usage:
            events.append(_event({**self.head, "choices": [], "usage": usage}))
        return events + [_DONE]


def logprobs_content(logprobs: Sequence[Tuple[str, float]]) -> Dict[str, Any]:
    """`choices[0].logprobs` for these (token text, log-prob) pairs."""
    return {"content": [{"token": token, "logprob": float(logprob), "bytes": list(token.encode("utf-8")),
                         "top_logprobs": []} for token, logprob in logprobs]}


def error_event(error: OpenAIError) -> bytes:
    """An error after a stream began (its status already sent): OpenAI's `data: {"error": ...}` event, which the
    openai client raises as an APIError."""
    return _event(error.body())


def stream_events(body: Dict[str, Any], include_usage: bool) -> List[bytes]:
    """`body` (a completion_body) as the SSE events OpenAI streams it in: the role, the content, each
    tool call (id and name, then its arguments), the finish reason, the usage when asked, [DONE].
    For a reply that is whole before it is sent (the session gateway's); `swerve serve` streams as it
    generates (policies/server/openai_api.py stream_completion)."""
    choice = body["choices"][0]
    message = choice["message"]
    logprobs = [choice["logprobs"]]  # sent once, with the first chunk that carries tokens
    chunks = StreamChunks(model=body["model"], fingerprint=body["system_fingerprint"], include_usage=include_usage,
                          completion_id=body["id"], created=body["created"])

    def tokens() -> Optional[Dict[str, Any]]:
        return logprobs.pop() if logprobs else None

    content = message["content"]
    # A tool-call-only reply has null content, as its non-streaming body; a text reply starts from "".
    events = [chunks.chunk({"role": "assistant", "content": None if content is None else ""})]
    if content:
        events.append(chunks.chunk({"content": content}, logprobs=tokens()))
    calls = message.get("tool_calls", [])
    if calls:
        events += chunks.tool_calls(calls, tokens())
    events.append(chunks.chunk({}, choice["finish_reason"], logprobs=tokens()))
    return events + chunks.end(body["usage"])


def _event(data: Dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False).encode("utf-8") + b"\n\n"
