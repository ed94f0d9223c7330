"""The session gateway: an OpenAI-compatible endpoint per trajectory for agent harnesses.

    POST /sessions/<id>/v1/chat/completions   (JSON or SSE, as the request asks)
    GET  /sessions/<id>/v1/models
    GET  /sessions/<id>/v1/models/<model id>

Each episode actor runs one gateway beside its sandbox lease, listening on the lease's Unix
socket (bound into the jail, where a forwarder on the jail's loopback is the harness's only
route) and, for tests and benchmarks, on a loopback port. Living in the episode's own process,
a request costs no Ray hop, and the number of gateways grows with the episode actors: there is
no connection cap and no shared core serving every agent.

The gateway owns the wire: it parses and validates a request (a bad one is answered at once,
OpenAI-style, and never reaches the episode), hands it to its session's inbox and waits for the
episode's answer (status, body) for at most `request_deadline_s`, then writes it as JSON or SSE.
What to answer is the episode's business (actors/episodes/harness_player.py): a request without
`max_tokens` gets the room its trajectory has left (min(engine.max_context_tokens,
rollout.max_total_tokens) less the prompt), and no turn more than `rollout.max_tokens_per_turn`,
the per-turn bound training set. A stream is written once the answer is whole (the episode generates
through the run's router, unstreamed). Every request is logged as one line at debug (logger
`swerve.requests`: method, path, status, tokens, time, an error's code and message), and every
error, an unknown route or a body that is not JSON or not Unicode included, is OpenAI's JSON error.
"""
from __future__ import annotations

import asyncio
import logging
import os
import queue
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from aiohttp import web

# Re-exported: what the gateway serves lives apart, so that episode actors without one skip aiohttp.
from actors.episodes.gateway_spec import POLICY_MODEL_ID, GatewaySpec  # noqa: F401
from configs.schema import DeadlinesConfig
from envs.sandboxes.gateway_route import make_connectable, unix_path
from policies.server.wire_http import note_error, note_usage, request_log_level, stream_sse, wire_middleware

from policies.chat.openai_wire import (ChatRequest, OpenAIError, model_not_found_error, model_object, models_body,
                                       not_found_error, parse_chat_request, parse_json, stream_events)

log = logging.getLogger(__name__)

SESSIONS = "/sessions/{sid}/v1"
# Each request's log line: at debug, as an episode actor serves many (Python logging shows them when asked).
REQUEST_LOG_LEVEL = "debug"


@dataclass
class Pending:
    """A request the episode has not answered yet."""
    request: ChatRequest
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop

    def answer(self, status: int, body: dict) -> None:
        self.loop.call_soon_threadsafe(_settle, self.future, (status, body))


def _settle(future: asyncio.Future, result: tuple) -> None:
    if not future.done():  # the client may have gone, or the deadline passed
        future.set_result(result)


@dataclass
class Session:
    """One trajectory's endpoint; the episode reads its inbox and answers each request."""
    sid: str
    api_key: str
    model: str
    max_model_len: int
    inbox: "queue.Queue[Pending]" = field(default_factory=queue.Queue)
    requests: int = 0
    refused: int = 0  # answered by the gateway itself: bad requests, unauthorised
    # Handed to the episode; answered ones are skipped when the session closes.
    taken: list = field(default_factory=list)

    def next_request(self, timeout_s: float) -> Optional[Pending]:
        try:
            pending = self.inbox.get(timeout=timeout_s)
        except queue.Empty:
            return None
        self.taken = [p for p in self.taken if not p.future.done()] + [pending]
        return pending


class Gateway:
    def __init__(self, model: str, max_model_len: int, request_deadline_s: float,
                 step_s: float = DeadlinesConfig.gateway_step_s):
        """model: the id /models reports and replies name; request_deadline_s: the longest a
        request waits for its answer (it must outlast an episode: deadlines.gateway_request_s);
        step_s: the longest its event loop may take to open or close a listener
        (deadlines.gateway_step_s)."""
        self.model = model
        self.step_s = step_s
        self.max_model_len = max_model_len
        self.request_deadline_s = request_deadline_s
        self._sessions: dict[str, Session] = {}
        self._loop = asyncio.new_event_loop()
        self._runner: Optional[web.AppRunner] = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="gateway", daemon=True)
        self._thread.start()
        self._run(self._start())
        self.port: Optional[int] = None
        self._unix_sites: dict[str, web.BaseSite] = {}

    # --- sessions -------------------------------------------------------------------------
    def open(self) -> Session:
        session = Session(secrets.token_hex(8), "sk-" + secrets.token_hex(16), self.model, self.max_model_len)
        self._sessions[session.sid] = session
        return session

    def close_session(self, session: Session) -> None:
        """Forget it; every request it still holds, queued or taken and never answered (the
        episode failed under it), is answered 404: its harness gets no more replies."""
        self._sessions.pop(session.sid, None)
        error = not_found_error(f"/sessions/{session.sid}/v1 (the episode ended)")
        queued = []
        while not session.inbox.empty():
            queued.append(session.inbox.get_nowait())
        for pending in [*session.taken, *queued]:
            pending.answer(error.status, error.body())
        session.taken = []

    # --- listening ------------------------------------------------------------------------
    def listen_tcp(self, host: str = "127.0.0.1", port: int = 0) -> int:
        site = self._run(self._site(lambda runner: web.TCPSite(runner, host, port)))
        self.port = site._server.sockets[0].getsockname()[1]
        return self.port

    def listen_unix(self, path: str) -> str:
        """Listen on a lease's socket (envs/sandboxes/gateway_route.py), once per path; sites whose socket
        is gone (a closed lease: pooled leases come and go) are stopped."""
        for gone in [p for p in self._unix_sites if p != path and not os.path.exists(p)]:
            self._run(self._unix_sites.pop(gone).stop())
        if path not in self._unix_sites:
            with unix_path(Path(path)) as bindable:
                self._unix_sites[path] = self._run(self._site(lambda runner: web.UnixSite(runner, bindable)))
            make_connectable(Path(path))
        return path

    def close(self) -> None:
        for session in list(self._sessions.values()):
            self.close_session(session)
        if self._runner is not None:
            self._run(self._runner.cleanup())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=self.step_s)

    def _run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=self.step_s)

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024,
                              middlewares=[wire_middleware(request_log_level(REQUEST_LOG_LEVEL))])
        app.router.add_post(SESSIONS + "/chat/completions", self._chat)
        app.router.add_get(SESSIONS + "/models", self._models)
        app.router.add_get(SESSIONS + "/models/{model_id:.+}", self._model)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()

    async def _site(self, make) -> web.BaseSite:
        site = make(self._runner)
        await site.start()
        return site

    # --- routes ---------------------------------------------------------------------------
    def _session(self, request: web.Request) -> Session:
        session = self._sessions.get(request.match_info["sid"])
        if session is None:
            raise not_found_error(request.path)
        header = request.headers.get("Authorization", "")
        if not secrets.compare_digest(header.encode(), f"Bearer {session.api_key}".encode()):
            session.refused += 1
            raise OpenAIError(401, "invalid API key for this session: use the OPENAI_API_KEY it was given",
                              code="invalid_api_key", type="authentication_error")
        return session

    async def _models(self, request: web.Request) -> web.Response:
        self._session(request)
        return web.json_response(models_body(self.model, self.max_model_len, 0))

    async def _model(self, request: web.Request) -> web.Response:
        self._session(request)
        if request.match_info["model_id"] != self.model:
            raise model_not_found_error(request.match_info["model_id"], self.model)
        return web.json_response(model_object(self.model, self.max_model_len, 0))

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        session = self._session(request)
        try:
            try:
                raw = await request.read()
            except web.HTTPRequestEntityTooLarge as error:
                raise OpenAIError(413, f"the request body is larger than the gateway takes ({error.text})",
                                  code="request_too_large") from error
            chat = parse_chat_request(parse_json(raw))
        except OpenAIError:
            session.refused += 1
            raise
        session.requests += 1
        future = asyncio.get_running_loop().create_future()
        session.inbox.put(Pending(chat, future, asyncio.get_running_loop()))
        try:
            status, reply = await asyncio.wait_for(future, self.request_deadline_s)
        except asyncio.TimeoutError as error:
            raise OpenAIError(504, f"no reply within deadlines.gateway_request_s={self.request_deadline_s:g}s",
                              code="timeout", type="server_error") from error
        usage = reply.get("usage") if status == 200 else None
        if usage:
            note_usage(request, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
        elif isinstance(reply.get("error"), dict):
            error = reply["error"]
            note_error(request, OpenAIError(status, str(error.get("message", "")), code=error.get("code"),
                                            type=str(error.get("type", "invalid_request_error"))))
        if status != 200 or not chat.stream:
            return web.json_response(reply, status=status)
        return await stream_sse(request, stream_events(reply, chat.include_usage))
