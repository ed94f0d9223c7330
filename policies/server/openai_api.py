"""OpenAI-compatible routes of the CPU server, as SGLang serves them beside its native API:
GET /v1/models and POST /v1/chat/completions (non-streaming), so an agent harness that
speaks OpenAI's API can talk to a trained policy.

A chat request is rendered with the model's own chat template (the one the policy was trained
on), chat-control tokens in the content neutralized as in training (a tool output cannot open
or close a turn), and generated like any /generate request; the reply is the decoded completion without its
stop token. Supported: messages (system / user / assistant, text content), max_tokens or
max_completion_tokens, temperature, top_p, seed, n=1, stop (strings, applied to the text).
Refused with an OpenAI-style error: stream=true, n > 1, tools, non-text content.
"""
from __future__ import annotations

import time
import uuid
from typing import Any, Dict, List, Optional

from aiohttp import web

from policies.conversation import neutralize_special_tokens
from policies.server import protocol
from policies.server.request import PromptTooLong, Request
from policies.server.serving import json_body, run_requests
from policies.server.state import ServerState

MODELS = "/v1/models"
CHAT_COMPLETIONS = "/v1/chat/completions"
ROLES = ("system", "user", "assistant")
_UNSUPPORTED = ("tools", "functions", "tool_choice", "response_format", "logit_bias")


def _openai_error(message: str, status: int = 400, param: Optional[str] = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error", "param": param,
                                        "code": None}}, status=status)


def model_name(state: ServerState) -> str:
    """The id clients name the model by: its path, as SGLang's default --served-model-name."""
    return state.cfg.model_path


def _messages(body: Dict[str, Any]) -> List[Dict[str, str]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {role, content}")
    out = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise ValueError(f"messages[{index}].role must be one of {', '.join(ROLES)}")
        content = message.get("content")
        if isinstance(content, list):  # content parts: text only
            if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
                raise ValueError(f"messages[{index}].content: only text parts are supported")
            content = "".join(str(p.get("text", "")) for p in content)
        if not isinstance(content, str):
            raise ValueError(f"messages[{index}].content must be a string")
        out.append({"role": message["role"], "content": neutralize_special_tokens(content)})
    return out


def _given(body: Dict[str, Any], key: str, default: Any) -> Any:
    """OpenAI clients send null for a parameter left out."""
    value = body.get(key)
    return default if value is None else value


def _sampling(body: Dict[str, Any]) -> protocol.SamplingParams:
    max_tokens = _given(body, "max_completion_tokens", _given(body, "max_tokens", protocol.DEFAULT_MAX_NEW_TOKENS))
    seed = body.get("seed")
    params = protocol.SamplingParams(
        max_new_tokens=int(max_tokens), temperature=float(_given(body, "temperature", 1.0)),
        top_p=float(_given(body, "top_p", 1.0)), sampling_seed=None if seed is None else int(seed))
    if params.max_new_tokens <= 0:
        raise ValueError("max_tokens must be positive")
    return params


def _stops(body: Dict[str, Any]) -> List[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise ValueError("stop must be a non-empty string or a list of them")
    return stops


def _cut_at_stop(text: str, stops: List[str]) -> tuple[str, bool]:
    cuts = [text.find(s) for s in stops if s in text]
    return (text[:min(cuts)], True) if cuts else (text, False)


def add_openai_routes(routes: web.RouteTableDef, state: ServerState) -> None:
    @routes.get(MODELS)
    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": model_name(state), "object": "model", "created": int(state.started), "owned_by": "swerve",
             "root": model_name(state), "max_model_len": state.cfg.max_context_tokens}]})

    @routes.post(CHAT_COMPLETIONS)
    async def chat_completions(request: web.Request) -> web.Response:
        body = await json_body(request)
        if body.get("stream"):
            return _openai_error("stream=true is not supported by the swerve CPU server", param="stream")
        if int(_given(body, "n", 1)) != 1:
            return _openai_error("only n=1 is supported", param="n")
        unsupported = [key for key in _UNSUPPORTED if body.get(key)]
        if unsupported:
            return _openai_error(f"not supported: {', '.join(unsupported)}", param=unsupported[0])
        if state.tokenizer is None:
            return _openai_error("this server has no tokenizer, so it cannot render a chat", status=500)
        try:
            messages, params, stops = _messages(body), _sampling(body), _stops(body)
            prompt = state.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                    return_dict=False)
            item = Request(prompt_ids=[int(t) for t in prompt], params=params)
            (finished,) = await run_requests(state.scheduler, [item])
        except PromptTooLong as error:
            return _openai_error(str(error), param="messages")
        except (ValueError, TypeError) as error:
            return _openai_error(str(error))
        reason = (finished.finish_reason or {}).get("type")
        ids = finished.output_ids
        if reason == protocol.FINISH_STOP and ids:
            ids = ids[:-1]  # the stop token itself is not part of the reply
        text, stopped = _cut_at_stop(state.tokenizer.decode(ids, skip_special_tokens=True), stops)
        finish = "stop" if reason == protocol.FINISH_STOP or stopped else "length"
        completion = len(finished.output_ids)
        return web.json_response({
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model_name(state),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
                         "logprobs": None}],
            "usage": {"prompt_tokens": len(finished.prompt_ids), "completion_tokens": completion,
                      "total_tokens": len(finished.prompt_ids) + completion},
            "system_fingerprint": f"weights-{finished.weight_version}",
        })
