"""Starting and stopping the CPU inference server.

`serve(cfg)` blocks (the `python -m policies.server` process, `main`); `start_server(...)` runs
one in a background thread and returns a handle (tests, `measure_throughput`). The pieces:
options.py (config, flags), state.py (model, tokenizer, scheduler), handlers.py (HTTP).
"""
from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
import sys
import threading
from typing import Any, Dict, Optional, Sequence

from aiohttp import web

from policies.server.handlers import build_app
from policies.server.options import ServerConfig, parse_args
from policies.server.state import ServerState

READY_LINE = "swerve cpu server ready on"
# Exit status of `python -m policies.server` refused for bad input (port taken, no model), as argparse's.
EXIT_BAD_INPUT = 2
# How long start_server waits for the server thread to bind its port.
START_TIMEOUT_S = 60.0


class PortInUse(OSError):
    """The server's port is taken by another process; the message names it and the fix."""

    def __init__(self, host: str, port: int):
        super().__init__(errno.EADDRINUSE, f"port {port} on {host} is already in use (another server still "
                         "running there?); pass --port N with a free port, or --port 0 to pick one")


def check_port_free(host: str, port: int) -> None:
    """Raise PortInUse when (host, port) cannot be bound; checked before a model is loaded
    (minutes for a large one), and again when the server binds."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # As aiohttp binds: a port left in TIME_WAIT by a previous server is free to reuse.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise PortInUse(host, port) from error
            raise


# ---------------------------------------------------------------------- running
class ServerHandle:
    """A server running in a background thread (tests, benchmarks)."""

    def __init__(self, state: ServerState, thread: threading.Thread, loop, runner, port: int):
        self.state, self._thread, self._loop, self._runner, self.port = (
            state, thread, loop, runner, port)
        self.url = f"http://{state.cfg.host}:{port}"

    def stop(self) -> None:
        async def shutdown():
            await self._runner.cleanup()

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=30)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self.state.scheduler.stop()

    def __enter__(self) -> "ServerHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


async def _start_site(state: ServerState):
    # handler_cancellation: a client that hangs up aborts its requests (frees the slots).
    runner = web.AppRunner(build_app(state), access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, state.cfg.host, state.cfg.port)
    try:
        await site.start()
    except OSError as error:
        await runner.cleanup()
        if error.errno == errno.EADDRINUSE:
            raise PortInUse(state.cfg.host, state.cfg.port) from error
        raise
    port = site._server.sockets[0].getsockname()[1]  # the real port when asked for 0
    return runner, port


def start_server(model_path: str, *, model=None, tokenizer=None, **kwargs) -> ServerHandle:
    """Start a server in a background thread; port 0 (the default here) picks a free one.
    kwargs: ServerConfig fields; `model` / `tokenizer`: already loaded ones to serve."""
    kwargs.setdefault("port", 0)
    state = ServerState(ServerConfig(model_path=model_path, **kwargs), model, tokenizer)
    loop = asyncio.new_event_loop()
    started: Dict[str, Any] = {}
    ready = threading.Event()

    def run():
        asyncio.set_event_loop(loop)
        try:
            started["runner"], started["port"] = loop.run_until_complete(_start_site(state))
        except BaseException as error:
            started["error"] = error
            ready.set()
            return
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name="swerve-server-http", daemon=True)
    thread.start()
    ready.wait(START_TIMEOUT_S)
    if "error" in started:
        state.scheduler.stop()
        raise started["error"]
    state.cfg.port = started["port"]
    return ServerHandle(state, thread, loop, started["runner"], started["port"])


def serve(cfg: ServerConfig) -> None:
    """Run the server in this process until interrupted (SIGINT/SIGTERM)."""
    check_port_free(cfg.host, cfg.port)
    state = ServerState(cfg)

    async def main_loop():
        runner, real_port = await _start_site(state)
        state.cfg.port = real_port
        print(f"{READY_LINE} http://{cfg.host}:{real_port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                continue  # not the main thread (in-thread server): its owner stops it
        await stop.wait()
        await runner.cleanup()

    try:
        asyncio.run(main_loop())
    finally:
        state.scheduler.stop()


def configure_logging(level: str) -> None:
    """Log records at `level` and above to stderr, each with its time (each request's line among them,
    at its ServerConfig.request_log_level)."""
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def main(argv: Optional[Sequence[str]] = None) -> int:
    cfg, log_level = parse_args(argv)
    configure_logging(log_level)
    try:
        serve(cfg)
    except (PortInUse, FileNotFoundError) as error:
        # Bad input, not a bug: one line that names the fix instead of a traceback.
        print(f"swerve cpu server: error: {error}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
