"""What `swerve serve` and the session gateway share over HTTP: one log line per request, OpenAI-shaped
errors for whatever a handler did not answer itself, and server-sent events.

`wire_middleware` (aiohttp) times each request and logs one line through Python logging (logger
`swerve.requests`, at the level asked for): method, path, status, prompt and completion tokens, seconds,
and for an error its code and message. On the OpenAI routes an `OpenAIError` raised by a handler
becomes its JSON answer; so do aiohttp's own refusals (an unknown route, a wrong method, a body over the
size limit), and anything unexpected is a logged traceback and a JSON 500 (OpenAI's shape, which also
carries SGLang's `{"error": {"message"}}`), never aiohttp's plain-text page. `stream_sse` writes a
reply that is whole before it is sent (the gateway's) as an event stream.

Kept apart from serving.py on purpose: the gateway lives in every episode actor, which must not import
torch (the scheduler serving.py runs on does: ~6 s of CPU and ~300 MB per process).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Dict, List, Optional

from aiohttp import web

from policies.chat.openai_reply import OpenAIError, not_found_error

REQUEST_LOGGER = "swerve.requests"
# engine.request_log_level / --request-log-level (configs/schema/engine.py RequestLogLevel): the level each
# request's line is logged at ("off": none).
_LEVELS: Dict[str, Optional[int]] = {
    "debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR, "off": None}
# Where a handler leaves what the log line reports (a typed request key where aiohttp has them).
_FACTS = web.RequestKey("swerve_request_facts", dict) if hasattr(web, "RequestKey") else "swerve_request_facts"
log = logging.getLogger(__name__)


def request_log_level(name: str) -> Optional[int]:
    """The logging level of a --request-log-level name (None: "off"); ValueError naming the choices."""
    if name not in _LEVELS:
        raise ValueError(f"request log level must be one of {', '.join(_LEVELS)}, got {name!r}")
    return _LEVELS[name]


def note_usage(request: web.Request, prompt_tokens: int, completion_tokens: int) -> None:
    """Tokens the request's line reports (a handler calls it once it knows them)."""
    facts = request.setdefault(_FACTS, {})
    facts["prompt_tokens"], facts["completion_tokens"] = prompt_tokens, completion_tokens


def note_error(request: web.Request, error: OpenAIError) -> None:
    """An error the handler answered itself (or, in a stream, sent after its status): named in the line."""
    request.setdefault(_FACTS, {})["error"] = f"{error.code or error.type}: {error.message}"


def openai_response(error: OpenAIError) -> web.Response:
    return web.json_response(error.body(), status=error.status)


def http_error(request: web.Request, error: web.HTTPException) -> OpenAIError:
    """aiohttp's own refusal as OpenAI's error."""
    if error.status == 404:
        return not_found_error(request.path)
    if isinstance(error, web.HTTPMethodNotAllowed):
        return OpenAIError(405, f"{request.method} {request.path} is not allowed: use "
                           f"{', '.join(sorted(error.allowed_methods))}", code="method_not_allowed")
    if error.status == 413:
        return OpenAIError(413, f"the request body is larger than this server takes ({error.text})",
                           code="request_too_large")
    return OpenAIError(error.status, error.text or error.reason,
                       type="invalid_request_error" if error.status < 500 else "server_error")


def wire_middleware(level: Optional[int], is_openai: Callable[[web.Request], bool] = lambda request: True,
                    logger: Optional[logging.Logger] = None):
    """The middleware: `level` that of each request's line (None: no line); `is_openai(request)` whether its
    errors take OpenAI's shape (the server's native routes keep SGLang's)."""
    logger = logger or logging.getLogger(REQUEST_LOGGER)

    @web.middleware
    async def middleware(request: web.Request, handler):
        started = time.perf_counter()
        status = 500
        try:
            try:
                response = await handler(request)
            except OpenAIError as error:
                response = openai_response(error)
                note_error(request, error)
            except web.HTTPException as error:
                if not is_openai(request):
                    status = error.status
                    raise
                converted = http_error(request, error)
                response = openai_response(converted)
                note_error(request, converted)
            except (asyncio.CancelledError, ConnectionResetError):
                status = 499  # the client went away (nginx's code for it)
                raise
            except Exception as error:  # a bug: logged with its traceback, answered in JSON
                log.exception("%s %s failed", request.method, request.path)
                internal = OpenAIError(500, f"internal error: {type(error).__name__}: {error}"[:500],
                                       type="server_error", code="internal_error")
                response = openai_response(internal)
                note_error(request, internal)
            status = response.status
            return response
        finally:
            if level is not None and logger.isEnabledFor(level):
                logger.log(level, _line(request, status, time.perf_counter() - started))

    return middleware


def _line(request: web.Request, status: int, seconds: float) -> str:
    facts = request.get(_FACTS, {})
    # raw_path: as the client sent it, percent-encoded: nothing in it can break the line.
    parts = [request.method, request.raw_path[:300], str(status)]
    if "prompt_tokens" in facts:
        parts += [f"prompt_tokens={facts['prompt_tokens']}", f"completion_tokens={facts['completion_tokens']}"]
    parts.append(f"{seconds:.3f}s")
    if "error" in facts:
        parts.append(" ".join(facts["error"].split())[:300])
    return " ".join(parts)


async def stream_sse(request: web.Request, events: List[bytes]) -> web.StreamResponse:
    """The events written as they come, then the end of the stream."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for event in events:
        await response.write(event)
    await response.write_eof()
    return response
