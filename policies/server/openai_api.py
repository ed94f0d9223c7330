"""OpenAI-compatible routes of the CPU server (`swerve serve`), as SGLang serves them beside its
native API: GET /v1/models, GET /v1/models/<id> and POST /v1/chat/completions, streaming or not, so
an agent harness that speaks OpenAI's API can talk to a trained policy. The wire format (what is
accepted, refused, and how replies look) is policies/chat/openai_wire.py, shared with the session
gateway.

A request is rendered with the model's own chat template (the one the policy was trained on; tools
included), chat-control tokens in the content neutralized as in training, and generated like any
/generate request. Without `max_tokens` it may fill the room its prompt leaves in the context
(OpenAI's default), `max_model_len` less the prompt. Generation ends at the model's stop token, at
max_tokens, or as soon as the text holds a `stop` string (the scheduler checks after every token,
policies/server/detokenize.py); the reply is the text before the stop string, and the usage bills the
tokens generated up to and including it. Qwen3-style `<tool_call>` blocks become tool_calls when
tools were offered. A stream sends the text as it is generated (`stream_completion`, below).
The model id is the served directory; a request may name any model (harnesses rewrite names).
Any other /v1 route answers an OpenAI-style 404. Errors are OpenAIErrors, answered as OpenAI does by
the app's middleware (policies/server/wire_http.py), which also logs one line per request.
"""
from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import Any, Deque, Dict, List, Optional, Tuple

import jinja2
from aiohttp import web

from policies.chat.openai_wire import (ChatRequest, OpenAIError, StreamChunks, completion_body, context_length_error,
                                       error_event, logprobs_content, model_not_found_error, model_object, models_body,
                                       not_found_error, parse_chat_request, parse_json, split_tool_calls,
                                       template_messages)
from policies.engines import protocol
from policies.server.detokenize import (IncrementalText, StopStrings, first_stop, held_stop_prefix, text_decoder,
                                        tokens_holding)
from policies.server.wire_http import note_error, note_usage
from policies.server.request import Request
from policies.server.serving import run_requests
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


def is_openai_path(request: web.Request) -> bool:
    """Whether a request's errors take OpenAI's shape: the /v1 routes but SGLang's native /v1/loads."""
    return request.path.startswith("/v1/") and request.path != protocol.LOADS


async def read_chat(request: web.Request) -> ChatRequest:
    """The request's body checked into a ChatRequest (OpenAIError 4xx for anything it cannot be)."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as error:
        raise OpenAIError(413, f"the request body is larger than this server takes ({error.text})",
                          code="request_too_large") from error
    return parse_chat_request(parse_json(raw))


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


def new_request(state: ServerState, chat: ChatRequest) -> Request:
    """The scheduler request a chat asks for: its rendered prompt, at most the room the prompt leaves (or
    max_tokens), ending at its stop strings."""
    prompt = _prompt(state, chat)
    limit = max_model_len(state)
    if len(prompt) >= limit:
        raise context_length_error(len(prompt), limit)
    room = limit - len(prompt)
    params = protocol.SamplingParams(
        max_new_tokens=room if chat.max_tokens is None else min(chat.max_tokens, room),
        temperature=1.0 if chat.temperature is None else chat.temperature,
        top_p=1.0 if chat.top_p is None else chat.top_p, sampling_seed=chat.seed)
    request = Request(prompt_ids=prompt, params=params)
    if chat.stop:
        request.stop_check = StopStrings(text_decoder(state.tokenizer), chat.stop)
    return request


def aborted(finished: Request) -> Optional[OpenAIError]:
    """The error for a request the server aborted (/abort_request, /pause_generation, a weight update)."""
    reason = finished.finish_reason or {}
    if reason.get("type") != protocol.FINISH_ABORT:
        return None
    return OpenAIError(503, f"the request was aborted on the server ({reason.get('message', '')}); retry it",
                       type="server_error", code="aborted")


@dataclass
class Reply:
    """What a finished request answers: the message, why it ended, the tokens billed, and the generated
    tokens that make up its text (with their log-probs)."""
    content: Optional[str]
    tool_calls: List[Dict[str, Any]]
    finish_reason: str
    completion_tokens: int
    token_ids: List[int]
    logprobs: List[float]


def reply_of(state: ServerState, chat: ChatRequest, finished: Request) -> Reply:
    reason = finished.finish_reason or {}
    stopped = reason.get("type") == protocol.FINISH_STOP
    ids, logprobs = list(finished.output_ids), list(finished.logprobs)
    billed = len(ids)
    if stopped and not isinstance(reason.get("matched"), str) and ids:
        ids = ids[:-1]  # the stop token itself is not part of the reply (a stop string's tokens are, cut below)
    decode = text_decoder(state.tokenizer)
    text = decode(ids)
    cut = first_stop(text, chat.stop)
    if cut is not None:
        # Billed: the tokens up to the end of the stop string (what the scheduler generated, unless the
        # string only showed once decoded whole); the reply: the text before it, and its tokens.
        billed = min(billed, tokens_holding(decode, ids, min(text.find(s) + len(s) for s in chat.stop if s in text)))
        text = text[:cut]
        ids = ids[:tokens_holding(decode, ids, len(text))]
        stopped = True
    content, tool_calls = split_tool_calls(text) if chat.parses_tool_calls else (text or None, [])
    return Reply(content, tool_calls, "stop" if stopped else "length", billed, ids, logprobs[:len(ids)])


def token_logprobs(state: ServerState, ids: List[int], logprobs: List[float]) -> List[Tuple[str, float]]:
    return [(state.tokenizer.decode([t]), lp) for t, lp in zip(ids, logprobs)]


async def _complete(state: ServerState, chat: ChatRequest, item: Request) -> Dict[str, Any]:
    try:
        (finished,) = await run_requests(state.scheduler, [item])
    except ValueError as error:  # refused by the scheduler's own checks
        raise OpenAIError(400, str(error)) from error
    error = aborted(finished)
    if error is not None:
        raise error
    reply = reply_of(state, chat, finished)
    return completion_body(
        model=model_name(state), content=reply.content, tool_calls=reply.tool_calls,
        finish_reason=reply.finish_reason, prompt_tokens=len(item.prompt_ids), completion_tokens=reply.completion_tokens,
        logprobs=token_logprobs(state, reply.token_ids, reply.logprobs) if chat.logprobs else None,
        fingerprint=f"weights-{finished.weight_version}")


# ---------------------------------------------------------------------- streaming
# A streamed chat completion of `swerve serve`: text sent as the scheduler generates it.
#
# The scheduler wakes the route after every token (Request.on_token); each wake sends, in one chunk,
# the text generated since the last (so a slow client gets fewer, larger chunks, never a backlog). What
# is sent is what the unstreamed reply will hold, so the chunks add up to it:
# - text that may begin a `stop` string is held until the next tokens show whether it does (a stop
#   string, and what follows it, is never sent);
# - with tools offered, the text from a `<tool_call>` on is held (the calls are sent whole, once parsed
#   at the end, as OpenAI streams a call: its id and name, then its arguments), and so is whitespace
#   before it (not content once a call follows);
# - an incomplete UTF-8 character waits for its last byte.
# The one difference left: a reply that starts with whitespace and then calls a tool streams that
# whitespace, which the unstreamed reply strips.
#
# The status (200) goes out with the first token; a request aborted before it is a 503, as unstreamed;
# one aborted after it ends its stream with OpenAI's error event. A client that hangs up aborts the
# request (its slot is freed).
TOOL_CALL_OPEN = "<tool_call>"


def releasable(text: str, chat: ChatRequest) -> str:
    """The part of the text generated so far that the reply will hold as content, whatever comes next."""
    cut = first_stop(text, chat.stop)
    text = text[:cut] if cut is not None else text[:len(text) - held_stop_prefix(text, chat.stop)]
    if chat.parses_tool_calls:
        call = text.find(TOOL_CALL_OPEN)
        text = text[:call] if call >= 0 else text[:len(text) - held_stop_prefix(text, [TOOL_CALL_OPEN])]
        text = text.rstrip()
    return text


class _Stream:
    def __init__(self, http_request: web.Request, state: ServerState, chat: ChatRequest, item: Request):
        self.http_request, self.state, self.chat, self.item = http_request, state, chat, item
        self.response: Optional[web.StreamResponse] = None
        self.chunks: Optional[StreamChunks] = None
        self.text = IncrementalText(text_decoder(state.tokenizer))
        self.sent = ""                            # content sent so far
        self.marks: Deque[Tuple[int, int]] = collections.deque()  # (tokens, characters of text they make up)
        self.covered = 0                          # tokens whose text is all in what was sent
        self.logprobs_sent = 0                    # tokens whose log-probs were sent
        self.opened = False                       # the role chunk was sent

    async def begin(self) -> None:
        """The status and headers, with the first token."""
        self.response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await self.response.prepare(self.http_request)
        self.chunks = StreamChunks(model=model_name(self.state), include_usage=self.chat.include_usage,
                                   fingerprint=f"weights-{self.state.scheduler.weight_version}")

    def _logprobs(self, upto: int) -> Optional[dict]:
        """Log-probs of the tokens after those sent, up to `upto` (None when none were asked for)."""
        if not self.chat.logprobs:
            return None
        ids = self.item.output_ids[self.logprobs_sent:upto]
        values = self.item.logprobs[self.logprobs_sent:upto]
        self.logprobs_sent = max(self.logprobs_sent, upto)
        return logprobs_content(token_logprobs(self.state, list(ids), list(values)))

    def _opening(self, content: Optional[str]) -> List[bytes]:
        """The role chunk, before the first content (or at the end: null content for a tool-call-only reply)."""
        if self.opened:
            return []
        self.opened = True
        return [self.chunks.chunk({"role": "assistant", "content": content})]

    async def advance(self) -> None:
        """Send what the tokens generated since the last call add to the content."""
        if self.text.feed(list(self.item.output_ids)):
            self.marks.append((self.text.tokens, len(self.text.text)))
        content = releasable(self.text.text, self.chat)
        if len(content) <= len(self.sent):
            return
        while self.marks and self.marks[0][1] <= len(content):
            self.covered = self.marks.popleft()[0]
        events = self._opening("")
        events.append(self.chunks.chunk({"content": content[len(self.sent):]}, logprobs=self._logprobs(self.covered)))
        self.sent = content
        await self.response.write(b"".join(events))

    async def finish(self) -> None:
        """The rest of the reply (content the end settled, tool calls), its finish reason, usage, [DONE]."""
        reply = reply_of(self.state, self.chat, self.item)
        note_usage(self.http_request, len(self.item.prompt_ids), reply.completion_tokens)
        events = self._opening(None if reply.content is None else "")
        kept = len(reply.token_ids)
        rest = reply.content[len(self.sent):] if reply.content and reply.content.startswith(self.sent) else ""
        if rest:
            events.append(self.chunks.chunk({"content": rest}, logprobs=self._logprobs(kept)))
        if reply.tool_calls:
            events += self.chunks.tool_calls(reply.tool_calls, self._logprobs(kept))
        events.append(self.chunks.chunk({}, "tool_calls" if reply.tool_calls else reply.finish_reason,
                                        logprobs=self._logprobs(kept) if self.logprobs_sent < kept else None))
        usage = {"prompt_tokens": len(self.item.prompt_ids), "completion_tokens": reply.completion_tokens,
                 "total_tokens": len(self.item.prompt_ids) + reply.completion_tokens}
        await self.response.write(b"".join(events + self.chunks.end(usage)))
        await self.response.write_eof()


async def stream_completion(http_request: web.Request, state: ServerState, chat: ChatRequest,
                            item: Request) -> web.StreamResponse:
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()
    item.on_token = item.on_done = lambda _: loop.call_soon_threadsafe(woken.set)
    try:
        state.scheduler.submit(item)
    except ValueError as error:  # refused by the scheduler's own checks
        raise OpenAIError(400, str(error)) from error
    stream = _Stream(http_request, state, chat, item)
    try:
        while True:
            await woken.wait()
            woken.clear()
            error = aborted(item) if item.done else None
            if stream.response is None:
                if error is not None:
                    raise error  # nothing sent yet: the status says it
                await stream.begin()
            if error is not None:
                note_error(http_request, error)
                await stream.response.write(error_event(error))
                await stream.response.write_eof()
                return stream.response
            await stream.advance()
            if item.done:
                await stream.finish()
                return stream.response
    finally:
        if not item.done:  # the client went away (or a write failed): free the slot
            state.scheduler.abort(item.rid)


def add_openai_routes(routes: web.RouteTableDef, state: ServerState) -> None:
    """Register the OpenAI routes; call last, as its /v1 catch-all answers every path not matched before it."""

    @routes.get(MODELS)
    async def models(request: web.Request) -> web.Response:
        return web.json_response(models_body(model_name(state), max_model_len(state), int(state.started)))

    @routes.get(MODELS + "/{model_id:.+}")
    async def model(request: web.Request) -> web.Response:
        wanted, served = request.match_info["model_id"], model_name(state)
        if wanted != served:
            raise model_not_found_error(wanted, served)
        return web.json_response(model_object(served, max_model_len(state), int(state.started)))

    @routes.post(CHAT_COMPLETIONS)
    async def chat_completions(request: web.Request) -> web.StreamResponse:
        chat = await read_chat(request)
        item = new_request(state, chat)
        if chat.stream:
            return await stream_completion(request, state, chat, item)
        body = await _complete(state, chat, item)
        note_usage(request, body["usage"]["prompt_tokens"], body["usage"]["completion_tokens"])
        return web.json_response(body)

    @routes.route("*", "/v1/{tail:.*}")
    async def unknown(request: web.Request) -> web.Response:
        if request.path in _ROUTES:
            raise OpenAIError(405, f"{request.method} {request.path} is not supported; send "
                              f"{_ROUTES[request.path]}", type="invalid_request_error", code="method_not_allowed")
        raise not_found_error(request.path)
