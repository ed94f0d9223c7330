"""OpenAI-compatible routes of the CPU server (`swerve serve`), as SGLang serves them beside its
native API: GET /v1/models and POST /v1/chat/completions, streaming or not, so an agent harness that
speaks OpenAI's API can talk to a trained policy. The wire format (what is accepted, refused, and
how replies look) is policies/chat/openai_wire.py, shared with the session gateway.

A request is rendered with the model's own chat template (the one the policy was trained on; tools
included), chat-control tokens in the content neutralized as in training, and generated like any
/generate request. The reply is the decoded completion without its stop token, cut at the first
`stop` string, with Qwen3-style `<tool_call>` blocks turned into tool_calls when tools were offered.
The model id is the served directory; a request may name any model (harnesses rewrite names).
Any other /v1 route answers an OpenAI-style 404.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import jinja2
from aiohttp import web

from policies.chat.openai_wire import (ChatRequest, OpenAIError, completion_body, context_length_error, models_body,
                                  not_found_error, parse_chat_request, parse_json, split_tool_calls, stream_events,
                                  template_messages)
from policies.engines import protocol
from policies.server.request import Request
from policies.server.serving import run_requests
from policies.server.sse import stream_sse
from policies.server.state import ServerState

MODELS = "/v1/models"
CHAT_COMPLETIONS = "/v1/chat/completions"
_ROUTES = {MODELS: "GET", CHAT_COMPLETIONS: "POST"}


def model_name(state: ServerState) -> str:
    """The id clients name the model by: its path, as SGLang's default --served-model-name."""
    return state.cfg.model_path


def max_model_len(state: ServerState) -> int:
    """The longest sequence served: the server's context cap, or the model's trained length when shorter."""
    trained = state.model.config.to_dict().get("max_position_embeddings")
    return state.cfg.max_context_tokens if trained is None else min(state.cfg.max_context_tokens, int(trained))


def _error(error: OpenAIError) -> web.Response:
    return web.json_response(error.body(), status=error.status)


def _prompt(state: ServerState, chat: ChatRequest) -> List[int]:
    if state.tokenizer is None:
        raise OpenAIError(500, "this server has no tokenizer, so it cannot render a chat; serve a model directory "
                          "that holds its tokenizer files", type="server_error")
    try:
        ids = state.tokenizer.apply_chat_template(template_messages(chat.messages), tools=chat.tools,
                                                  add_generation_prompt=True, tokenize=True, return_dict=False)
    except jinja2.TemplateError as error:  # the template's own raise_exception: a conversation it cannot render
        raise OpenAIError(400, f"the model's chat template cannot render these messages: {error}",
                          param="messages") from error
    return [int(t) for t in ids]


def _cut_at_stop(state: ServerState, ids: List[int], text: str, stops: List[str]) -> Tuple[List[int], str, bool]:
    """The reply up to the first stop string, and the generated tokens that make it up."""
    cuts = [text.find(s) for s in stops if s in text]
    if not cuts:
        return ids, text, False
    text = text[:min(cuts)]
    kept = next(n for n in range(len(ids) + 1)
                if len(state.tokenizer.decode(ids[:n], skip_special_tokens=True)) >= len(text))
    return ids[:kept], text, True


async def _complete(state: ServerState, chat: ChatRequest) -> Dict[str, Any]:
    prompt = _prompt(state, chat)
    limit = max_model_len(state)
    if len(prompt) >= limit:
        raise context_length_error(len(prompt), limit)
    wanted = protocol.DEFAULT_MAX_NEW_TOKENS if chat.max_tokens is None else chat.max_tokens
    params = protocol.SamplingParams(
        max_new_tokens=min(wanted, limit - len(prompt)),
        temperature=1.0 if chat.temperature is None else chat.temperature,
        top_p=1.0 if chat.top_p is None else chat.top_p, sampling_seed=chat.seed)
    (finished,) = await run_requests(state.scheduler, [Request(prompt_ids=prompt, params=params)])
    reason = finished.finish_reason or {}
    if reason.get("type") == protocol.FINISH_ABORT:  # /abort_request, /pause_generation or a weight update
        raise OpenAIError(503, f"the request was aborted on the server ({reason.get('message', '')}); retry it",
                          type="server_error", code="aborted")
    stopped = reason.get("type") == protocol.FINISH_STOP
    ids, logprobs = list(finished.output_ids), list(finished.logprobs)
    if stopped and ids:
        ids = ids[:-1]  # the stop token itself is not part of the reply
    text = state.tokenizer.decode(ids, skip_special_tokens=True)
    ids, text, cut = _cut_at_stop(state, ids, text, chat.stop)
    content, tool_calls = split_tool_calls(text) if chat.parses_tool_calls else (text or None, [])
    return completion_body(
        model=model_name(state), content=content, tool_calls=tool_calls,
        finish_reason="stop" if stopped or cut else "length", prompt_tokens=len(prompt),
        completion_tokens=len(finished.output_ids),
        logprobs=[(state.tokenizer.decode([t]), lp) for t, lp in zip(ids, logprobs)] if chat.logprobs else None,
        fingerprint=f"weights-{finished.weight_version}")


def add_openai_routes(routes: web.RouteTableDef, state: ServerState) -> None:
    """Register the OpenAI routes; call last, as its /v1 catch-all answers every path not matched before it."""

    @routes.get(MODELS)
    async def models(request: web.Request) -> web.Response:
        return web.json_response(models_body(model_name(state), max_model_len(state), int(state.started)))

    @routes.post(CHAT_COMPLETIONS)
    async def chat_completions(request: web.Request) -> web.StreamResponse:
        try:
            chat = parse_chat_request(parse_json(await request.read()))
            body = await _complete(state, chat)
        except OpenAIError as error:
            return _error(error)
        if not chat.stream:
            return web.json_response(body)
        return await stream_sse(request, stream_events(body, chat.include_usage))

    @routes.route("*", "/v1/{tail:.*}")
    async def unknown(request: web.Request) -> web.Response:
        if request.path in _ROUTES:
            return _error(OpenAIError(405, f"{request.method} {request.path} is not supported; send "
                                      f"{_ROUTES[request.path]}", type="invalid_request_error",
                                      code="method_not_allowed"))
        return _error(not_found_error(request.path))
