"""A small in-test envd (the agent inside an E2B sandbox), so the real e2b SDK runs offline.

With E2B_DEBUG=true the SDK skips the cloud API and talks to envd directly: Connect RPC with
the JSON codec for processes (served here by the SDK's own generated ASGI stubs,
e2b.envd.process.process_connect.ProcessASGIApplication), plus REST `/files` and `/health`.
aiohttp (installed with ray[default]) is the HTTP server; a few lines bridge it to ASGI.
Commands run as real subprocesses on this host with envd's minimal environment, never the
test process's own. It listens on 127.0.0.1 only, on a free port unless one is given.
"""
from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path
from typing import Dict, Optional

from aiohttp import web
from e2b.envd.process import process_connect, process_pb
from protobuf import Oneof

# The environment envd gives a process: its own, not the caller's.
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
_Event = process_pb.ProcessEvent


def _event(**kind) -> process_pb.StartResponse:
    (name, value), = kind.items()
    return process_pb.StartResponse(event=_Event(event=Oneof(name, value)))


class ProcessService(process_connect.Process):
    """envd's process.Process service: Start (server stream), SendSignal, List."""

    def __init__(self) -> None:
        self.procs: Dict[int, asyncio.subprocess.Process] = {}
        self.started: list[process_pb.StartRequest] = []
        self.signals: list[int] = []
        self.authorizations: list[str] = []

    async def start(self, request, ctx):
        self.started.append(request)
        self.authorizations.append(ctx.request_headers.get("authorization", ""))
        config = request.process
        proc = await asyncio.create_subprocess_exec(
            config.cmd, *config.args,
            cwd=config.cwd or "/", env={**BASE_ENV, **dict(config.envs)},
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self.procs[proc.pid] = proc
        yield _event(start=_Event.StartEvent(pid=proc.pid))
        queue: asyncio.Queue = asyncio.Queue(maxsize=64)

        async def pump(stream, field):
            while chunk := await stream.read(65536):
                await queue.put((field, chunk))
            await queue.put(None)

        pumps = [asyncio.ensure_future(pump(proc.stdout, "stdout")), asyncio.ensure_future(pump(proc.stderr, "stderr"))]
        try:
            open_streams = 2
            while open_streams:
                item = await queue.get()
                if item is None:
                    open_streams -= 1
                    continue
                yield _event(data=_Event.DataEvent(output=Oneof(*item)))
            code = await proc.wait()
            status = f"exit status {code}" if code >= 0 else f"signal: {signal.Signals(-code).name}"
            yield _event(end=_Event.EndEvent(exit_code=code if code >= 0 else -1, exited=code >= 0, status=status))
        finally:
            # Like envd, a dropped client does not kill the process: the SDK user must.
            for task in pumps:
                task.cancel()

    async def send_signal(self, request, ctx):
        pid = request.process.selector.value
        self.signals.append(pid)
        try:
            os.killpg(pid, signal.SIGKILL if request.signal == process_pb.Signal.SIGKILL else signal.SIGTERM)
        except ProcessLookupError:
            pass
        return process_pb.SendSignalResponse()

    async def list(self, request, ctx):
        running = [pid for pid, proc in self.procs.items() if proc.returncode is None]
        return process_pb.ListResponse(processes=[process_pb.ProcessInfo(pid=pid) for pid in running])


def _asgi_handler(app):
    """An aiohttp handler that serves an ASGI application (HTTP only)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": request.method, "scheme": "http", "path": request.path,
            "raw_path": request.raw_path.encode(), "query_string": request.query_string.encode(),
            "root_path": "", "headers": [(k.lower(), v) for k, v in request.raw_headers],
            "client": request.transport.get_extra_info("peername") if request.transport else None,
            "server": ("127.0.0.1", 0),
        }
        body_sent = False
        response: Optional[web.StreamResponse] = None

        async def receive():
            nonlocal body_sent
            if body_sent:
                await asyncio.Event().wait()  # until cancelled: the client went away
            chunk = await request.content.read()
            body_sent = True
            return {"type": "http.request", "body": chunk, "more_body": False}

        async def send(message):
            nonlocal response
            if message["type"] == "http.response.start":
                response = web.StreamResponse(status=message["status"])
                for key, value in message.get("headers", ()):
                    response.headers.add(key.decode(), value.decode())
                await response.prepare(request)
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    await response.write(message["body"])
                if not message.get("more_body"):
                    await response.write_eof()

        await app(scope, receive, send)
        return response

    return handle


class FakeEnvd:
    """envd on 127.0.0.1 in a background thread; `url` goes into E2B_SANDBOX_URL."""

    def __init__(self, port: int = 0):
        self.port = port
        self.process = ProcessService()
        self.files_written: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-envd", daemon=True)
        self._runner: Optional[web.AppRunner] = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FakeEnvd":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=10)
        return self

    def stop(self) -> None:
        for proc in self.process.procs.values():
            if proc.returncode is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _serve(self) -> None:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_get("/health", self._health)
        app.router.add_get("/files", self._read)
        app.router.add_post("/files", self._write)
        app.router.add_route("*", "/{rpc:.*}", _asgi_handler(process_connect.ProcessASGIApplication(self.process)))
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    async def _health(self, request):
        return web.Response(status=204)

    async def _read(self, request):
        path = Path(request.query["path"])
        if not path.is_file():
            return web.json_response({"code": 404, "message": f"path '{path}' does not exist"}, status=404)
        return web.Response(body=path.read_bytes(), content_type="application/octet-stream")

    async def _write(self, request):
        written = []
        if request.content_type == "multipart/form-data":
            reader = await request.multipart()
            while (part := await reader.next()) is not None:
                target = request.query.get("path") or part.filename
                written.append(self._store(target, await part.read()))
        else:
            written.append(self._store(request.query["path"], await request.read()))
        return web.json_response(written)

    def _store(self, target: str, data: bytes) -> dict:
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.files_written.append(str(path))
        return {"name": path.name, "type": "file", "path": str(path)}
