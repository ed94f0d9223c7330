"""Server-sent events over aiohttp: how `swerve serve`'s OpenAI route and the session gateway stream
a reply. Kept apart from serving.py on purpose: the gateway lives in every episode actor, which must
not import torch (the scheduler serving.py runs on does: ~6 s of CPU and ~300 MB per process)."""
from __future__ import annotations

from typing import List

from aiohttp import web


async def stream_sse(request: web.Request, events: List[bytes]) -> web.StreamResponse:
    """The events written as they come, then the end of the stream."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for event in events:
        await response.write(event)
    await response.write_eof()
    return response
