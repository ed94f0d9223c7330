"""OpenAI's chat-completions wire format, shared by the session gateway (actors/) and `swerve serve`
(policies/server/openai_api.py): a request body checked into a ChatRequest, its messages as a chat
template wants them. Messages are checked in policies/chat/openai_messages.py; replies (errors, completion
bodies, SSE streams, tool-call parsing) are policies/chat/openai_reply.py, re-exported here so callers
import one module.

Pure: no aiohttp, Ray or envs. Every field is checked: a bad value is a 400 naming it, and a field
the engines cannot honour is refused by name, never ignored; an unknown top-level field is refused
too. Accepted as given are fields that change nothing about the reply (identifiers, billing and
storage hints: `user`, `metadata`, `service_tier`, `prompt_cache_key`, `safety_identifier`,
`store: false`, `parallel_tool_calls`, `stream_options`) and the neutral value of the others
(`n: 1`, zero penalties, `response_format: text`, `modalities: [text]`, `top_logprobs: 0`, empty
`logit_bias`). `reasoning_effort` is refused: it asks the model to think more or less, which a
policy sampled as trained cannot do, and a harness must not believe it did.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

from policies.chat.conversation import neutralize_json, neutralize_special_tokens
from policies.chat.openai_messages import check_text, parse_messages
from policies.chat.openai_reply import (OpenAIError, StreamChunks, completion_body,  # noqa: F401 (re-exported)
                                        context_length_error, error_event, logprobs_content, model_not_found_error,
                                        model_object, models_body, not_found_error, split_tool_calls, stream_events)

# Changes nothing about the reply: accepted with any value of the right type.
_HARMLESS = {"user": str, "metadata": dict, "service_tier": str, "prompt_cache_key": str,
             "safety_identifier": str, "parallel_tool_calls": bool}
# A feature, not a sampling knob: never honoured, so any non-null value is refused with the reason.
_REFUSED = {
    "functions": "the legacy `functions` field is not supported; send `tools`",
    "function_call": "the legacy `function_call` field is not supported; send `tool_choice`",
    "audio": "audio output is not supported",
    "prediction": "predicted outputs are not supported",
    "reasoning_effort": "reasoning_effort cannot be honoured: the policy is sampled as trained",
    "verbosity": "verbosity cannot be honoured: the policy is sampled as trained",
    "web_search_options": "web search is not supported",
}
_KNOWN = {"model", "messages", "tools", "tool_choice", "max_tokens", "max_completion_tokens", "stop", "seed",
          "temperature", "top_p", "logprobs", "top_logprobs", "stream", "stream_options", "n",
          "presence_penalty", "frequency_penalty", "logit_bias", "response_format", "modalities", "store",
          *_HARMLESS, *_REFUSED}
_STREAM_OPTIONS = {"include_usage", "include_obfuscation"}
# OpenAI's bound on top_logprobs.
MAX_TOP_LOGPROBS = 20
# A JSON escape of a UTF-16 surrogate (its pair, or it alone).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


@dataclass
class ChatRequest:
    """One checked chat-completions request; `messages` normalized (see openai_messages.py)."""

    messages: List[Dict[str, Any]]
    tools: Optional[List[Dict[str, Any]]]
    tool_choice: Union[str, Dict[str, Any], None]
    max_tokens: Optional[int]
    stop: List[str]
    seed: Optional[int]
    temperature: Optional[float]
    top_p: Optional[float]
    logprobs: bool
    top_logprobs: int
    stream: bool
    include_usage: bool
    model: str

    @property
    def parses_tool_calls(self) -> bool:
        """Whether a reply's <tool_call> blocks become tool_calls: only when tools were offered and
        not switched off (tool_choice "none"); otherwise they stay the reply's text."""
        return bool(self.tools) and self.tool_choice != "none"


def parse_json(raw: bytes) -> object:
    """A request body's JSON; OpenAIError 400 when it is empty, not JSON, nested past what the parser
    can follow, or holds a lone UTF-16 surrogate (`"\\ud800"`: valid JSON, but no Unicode text a
    tokenizer or a reply could carry) anywhere, a key included."""
    if not raw.strip():
        raise OpenAIError(400, "the request body is empty; send a JSON object", code="invalid_json")
    try:
        body = json.loads(raw)
    except ValueError as error:  # UnicodeDecodeError (bytes that are not UTF-8) and huge integers included
        raise OpenAIError(400, f"the request body is not valid JSON: {str(error)[:200]}",
                          code="invalid_json") from error
    except RecursionError as error:
        raise OpenAIError(400, "the request body nests objects and lists too deeply to parse",
                          code="invalid_json") from error
    # A surrogate can only come from a \uD800-\uDFFF escape (UTF-8 cannot encode one): bodies without
    # such an escape (nearly all) are not walked. A body in UTF-16 or UTF-32 (NUL bytes up front) always is.
    if _SURROGATE_ESCAPE.search(raw) or b"\x00" in raw[:4]:
        check_text(body, "", max_nesting=None)
    return body


def parse_chat_request(body: object) -> ChatRequest:
    """Check a /chat/completions body; OpenAIError(400, param=<field>) for anything bad or refused."""
    if not isinstance(body, dict):
        raise OpenAIError(400, f"the request body must be a JSON object, got {type(body).__name__}",
                          code="invalid_type")
    unknown = sorted(key for key in body if key not in _KNOWN)
    if unknown:
        raise OpenAIError(400, f"unknown field {unknown[0]!r}: swerve does not support it; remove it",
                          param=unknown[0], code="unknown_parameter")
    given = {key: value for key, value in body.items() if value is not None}  # clients send null for omitted
    for key, expected in _HARMLESS.items():
        if key in given and not isinstance(given[key], expected):
            raise _invalid(key, f"{key} must be a {expected.__name__}")
    check_text(given.get("metadata"), "metadata")
    for key, reason in _REFUSED.items():
        if key in given:
            raise _unsupported(key, reason)
    _check_neutral(given)
    model = given.get("model")
    if not isinstance(model, str) or not model:
        raise _invalid("model", "model is required: the id GET /v1/models lists")
    logprobs = _bool(given, "logprobs")
    top_logprobs = _int(given, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if top_logprobs:
        raise _unsupported("top_logprobs", "top_logprobs > 0 cannot be honoured: the engine returns only the "
                           "sampled token's log-prob; send logprobs=true with top_logprobs 0 or omitted")
    stream_options = given.get("stream_options", {})
    if not isinstance(stream_options, dict) or not set(stream_options) <= _STREAM_OPTIONS:
        raise _invalid("stream_options", f"stream_options must be an object with {sorted(_STREAM_OPTIONS)}")
    tools, tool_choice = _tools(given.get("tools")), _tool_choice(given.get("tool_choice"))
    return ChatRequest(
        messages=parse_messages(given.get("messages")), tools=tools, tool_choice=tool_choice,
        max_tokens=_max_tokens(given), stop=_stop(given.get("stop")), seed=_int(given, "seed", 0, 2**63 - 1),
        temperature=_number(given, "temperature", 0.0, 2.0), top_p=_top_p(given),
        logprobs=bool(logprobs), top_logprobs=top_logprobs or 0, stream=bool(_bool(given, "stream")),
        include_usage=bool(_bool(stream_options, "include_usage", "stream_options.include_usage")),
        model=model)


def template_messages(messages: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Normalized messages as a (Qwen3-family) chat template expects them: tool-call arguments as
    objects, no None content, and chat-control tokens broken up in every text, so no message (a tool
    output least of all) can open or close a turn. Roles are kept: the template decides about developer."""
    out = []
    for message in messages:
        rendered: Dict[str, Any] = {"role": message["role"],
                                    "content": neutralize_special_tokens(message["content"] or "")}
        for key in ("name", "tool_call_id", "reasoning_content"):
            if key in message:
                rendered[key] = neutralize_special_tokens(message[key])
        if message.get("tool_calls"):
            rendered["tool_calls"] = [
                {"id": call["id"], "type": "function",
                 "function": {"name": neutralize_special_tokens(call["function"]["name"]),
                              "arguments": neutralize_json(json.loads(call["function"]["arguments"]))}}
                for call in message["tool_calls"]]
        out.append(rendered)
    return out


# ---------------------------------------------------------------------- fields
def _invalid(param: str, message: str) -> OpenAIError:
    return OpenAIError(400, message, param=param, code="invalid_value")


def _unsupported(param: str, message: str) -> OpenAIError:
    return OpenAIError(400, message, param=param, code="unsupported_parameter")


def _check_neutral(given: Dict[str, Any]) -> None:
    """Fields swerve honours only at the value that asks for nothing."""
    n = _int(given, "n", 1)
    if n not in (None, 1):
        raise _unsupported("n", f"n={n} is not supported: one choice per request (send n=1 or omit it)")
    for key in ("presence_penalty", "frequency_penalty"):
        if _number(given, key, -2.0, 2.0):
            raise _unsupported(key, f"{key} cannot be honoured: the policy is sampled as trained (send 0 or omit it)")
    if given.get("logit_bias") not in (None, {}):
        raise _unsupported("logit_bias", "logit_bias cannot be honoured: the policy is sampled as trained")
    if given.get("response_format") not in (None, {"type": "text"}):
        raise _unsupported("response_format", "only response_format {\"type\": \"text\"} is supported: "
                           "swerve cannot constrain the reply to JSON or a schema")
    if given.get("modalities") not in (None, ["text"]):
        raise _unsupported("modalities", "only modalities [\"text\"] is supported")
    if _bool(given, "store"):
        raise _unsupported("store", "store=true is not supported: swerve stores no completions")


def _bool(given: Dict[str, Any], key: str, param: Optional[str] = None) -> Optional[bool]:
    value = given.get(key)
    if value is not None and not isinstance(value, bool):
        raise _invalid(param or key, f"{param or key} must be true or false, got {value!r}")
    return value


def _int(given: Dict[str, Any], key: str, low: int, high: Optional[int] = None) -> Optional[int]:
    value = given.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(key, f"{key} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise _invalid(key, f"{key} must be {bound}, got {value}")
    return value


def _number(given: Dict[str, Any], key: str, low: float, high: float) -> Optional[float]:
    value = given.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _invalid(key, f"{key} must be a number, got {value!r}")
    if not low <= value <= high:
        raise _invalid(key, f"{key} must be in [{low:g}, {high:g}], got {value}")
    return float(value)


def _top_p(given: Dict[str, Any]) -> Optional[float]:
    top_p = _number(given, "top_p", 0.0, 1.0)
    if top_p == 0.0:
        raise _invalid("top_p", "top_p must be in (0, 1]; for greedy replies send temperature 0")
    return top_p


def _max_tokens(given: Dict[str, Any]) -> Optional[int]:
    key = "max_completion_tokens" if "max_completion_tokens" in given else "max_tokens"
    return _int(given, key, 1)


# SGLang's own limit on a request's stop strings (OpenAI's is 4).
MAX_STOP_STRINGS = 32


def _stop(stop: Any) -> List[str]:
    stops = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise _invalid("stop", "stop must be a non-empty string or a list of them")
    if len(stops) > MAX_STOP_STRINGS:
        # SGLang refuses more, and a refused engine request would be the engine's failure, not the caller's.
        raise _invalid("stop", f"stop holds {len(stops)} strings; at most {MAX_STOP_STRINGS} are accepted")
    return list(stops)


def _tools(tools: Any) -> Optional[List[Dict[str, Any]]]:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise _invalid("tools", "tools must be a list of {\"type\": \"function\", \"function\": {...}}")
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "function" or set(tool) - {"type", "function"}:
            raise _unsupported(f"{where}.type", f"{where}: only {{\"type\": \"function\", \"function\": {{...}}}} "
                               "tools are supported")
        function = tool.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise _invalid(f"{where}.function", f"{where}.function must be an object with a non-empty name")
        extra = sorted(set(function) - {"name", "description", "parameters", "strict"})
        if extra:
            raise _invalid(f"{where}.function.{extra[0]}", f"{where}.function: unknown field {extra[0]!r}")
        if not isinstance(function.get("description", ""), str) or not isinstance(function.get("parameters", {}), dict):
            raise _invalid(f"{where}.function", f"{where}.function: description must be a string and "
                           "parameters a JSON schema object")
        check_text(function.get("parameters"), f"{where}.function.parameters")
        if function.get("strict"):
            raise _unsupported(f"{where}.function.strict", "strict tools cannot be honoured: swerve does not "
                               "constrain sampling to a schema (send strict false or omit it)")
    return [dict(tool) for tool in tools] or None


def _tool_choice(choice: Any) -> Union[str, Dict[str, Any], None]:
    if choice is None or choice in ("auto", "none"):
        return choice
    if choice == "required" or isinstance(choice, dict):
        raise _unsupported("tool_choice", "tool_choice can only be \"auto\" or \"none\": swerve cannot force "
                           "the policy to call a tool")
    raise _invalid("tool_choice", f"tool_choice must be \"auto\" or \"none\", got {choice!r}")
