"""What every route of the CPU server shares: JSON bodies in, errors out, requests run on the
scheduler from aiohttp's loop."""
from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, List

from aiohttp import web

from policies.engines import protocol
from policies.server.request import Request
from policies.server.scheduler import Scheduler


def error_response(message: str, status: int = 400) -> web.Response:
    return web.json_response(protocol.error_body(message), status=status)


def bad_request(message: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=json.dumps(protocol.error_body(message)), content_type="application/json")


async def json_body(request: web.Request, required: bool = True) -> Dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        if required:
            raise bad_request("empty request body")
        return {}
    try:
        body = json.loads(raw)
    except ValueError as error:
        raise bad_request(f"invalid JSON: {str(error)[:200]}")
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    return body


async def run_requests(scheduler: Scheduler, items: List[Request]) -> List[Request]:
    """Submit items and wait for all of them; a failure (or a client gone) aborts what was queued."""
    loop = asyncio.get_running_loop()
    futures = []
    submitted: List[Request] = []

    def done_callback(future):
        def on_done(finished: Request) -> None:
            loop.call_soon_threadsafe(lambda: None if future.done() else future.set_result(finished))
        return on_done

    try:
        for item in items:
            future = loop.create_future()
            item.on_done = done_callback(future)
            scheduler.submit(item)
            submitted.append(item)
            futures.append(future)
        return list(await asyncio.gather(*futures))
    except BaseException:
        for item in submitted:
            if not item.done:
                scheduler.abort(item.rid)
        raise

