"""The CPU inference server's HTTP front (aiohttp): SGLang's native endpoints, our scheduler.

`serve(...)` blocks (the `python -m policies.server` process); `start_server(...)` runs one
in a background thread and returns a handle (tests, `measure_throughput`). Shapes and
deviations from SGLang are documented in `protocol.py`.
"""
from __future__ import annotations

import argparse
import asyncio
import errno
import glob
import logging
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import torch
from aiohttp import web

from policies.server import protocol
from policies.server.scheduler import PromptTooLong, Request, Scheduler
from policies.server.process import free_port

log = logging.getLogger("swerve.server")

SERVER_VERSION = "swerve-cpu-0.1"
STATE_KEY = web.AppKey("swerve_server_state", object)
HEALTH_CHECK_TIMEOUT_S = 20.0
READY_LINE = "swerve cpu server ready on"
# Exit status of `python -m policies.server` refused for bad input (port taken, no model), as argparse's.
EXIT_BAD_INPUT = 2


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


@dataclass
class ServerConfig:
    model_path: str
    host: str = "127.0.0.1"
    port: int = 30000
    max_batch_size: int = 16
    max_context_tokens: int = 4096
    max_total_tokens: Optional[int] = None
    max_prefill_tokens: Optional[int] = None
    weight_version: str = "0"
    torch_threads: int = 1
    # KV of finished requests kept for their conversation's next turn (0: no prefix cache).
    prefix_cache_tokens: int = 0


class ServerState:
    def __init__(self, cfg: ServerConfig, model=None, tokenizer=None):
        from policies.model import load_model

        self.cfg = cfg
        if cfg.torch_threads > 0:
            torch.set_num_threads(cfg.torch_threads)
        self.model = model if model is not None else load_model(cfg.model_path)
        self.tokenizer = tokenizer if tokenizer is not None else _load_tokenizer(cfg.model_path)
        self.scheduler = Scheduler(
            self.model, max_batch_size=cfg.max_batch_size,
            max_context_tokens=cfg.max_context_tokens, max_total_tokens=cfg.max_total_tokens,
            max_prefill_tokens=cfg.max_prefill_tokens, weight_version=cfg.weight_version,
            eos_token_ids=_eos_token_ids(self.model), prefix_cache_tokens=cfg.prefix_cache_tokens,
        )
        config = self.model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", config.num_attention_heads)
        element = torch.finfo(self.model.dtype).bits // 8
        self.kv_bytes_per_token = 2 * config.num_hidden_layers * kv_heads * head_dim * element
        self.started = time.time()


def _load_tokenizer(path: str):
    try:
        from policies.tokenizer import load_tokenizer

        return load_tokenizer(path)
    except Exception as error:  # a weights-only directory: no text, token ids still work
        log.warning("no tokenizer at %s (%s); responses carry empty text", path, error)
        return None


def _eos_token_ids(model) -> List[int]:
    ids: List[int] = []
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if value is None:
            continue
        ids.extend(value if isinstance(value, (list, tuple)) else [value])
    return sorted({int(i) for i in ids})


# ---------------------------------------------------------------------- helpers
def _error(message: str, status: int = 400) -> web.Response:
    return web.json_response(protocol.error_body(message), status=status)


async def _json_body(request: web.Request, required: bool = True) -> Dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        if required:
            raise web.HTTPBadRequest(text='{"error": {"message": "empty request body"}}',
                                     content_type="application/json")
        return {}
    try:
        import json

        body = json.loads(raw)
    except ValueError as error:
        raise web.HTTPBadRequest(
            text=f'{{"error": {{"message": "invalid JSON: {str(error)[:200]}"}}}}',
            content_type="application/json")
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text='{"error": {"message": "the body must be a JSON object"}}',
                                 content_type="application/json")
    return body


def _per_item(value: Any, count: int, batch: bool, name: str) -> List[Any]:
    if batch and isinstance(value, list):
        if len(value) != count:
            raise ValueError(f"{name} has {len(value)} entries for {count} prompts")
        return value
    if batch and name == "rid" and value is not None:
        raise ValueError("rid must be a list for a batch of input_ids")
    return [value] * count


def _response(state: ServerState, request: Request) -> Dict[str, Any]:
    params = request.params
    text_ids = request.output_ids
    reason = request.finish_reason or {}
    if reason.get("type") == protocol.FINISH_STOP and not params.no_stop_trim and text_ids:
        text_ids = text_ids[:-1]
    text = ""
    if state.tokenizer is not None and text_ids:
        text = state.tokenizer.decode(text_ids, skip_special_tokens=params.skip_special_tokens)
    meta: Dict[str, Any] = {
        "id": request.rid,
        "finish_reason": reason,
        "prompt_tokens": len(request.prompt_ids),
        "completion_tokens": len(request.output_ids),
        "cached_tokens": 0,
        "weight_version": request.weight_version,
        "e2e_latency": max(request.finished_at - request.created, 0.0),
        protocol.OUTPUT_TOKEN_WEIGHT_VERSIONS: list(request.versions),
    }
    if request.return_logprob:
        meta["input_token_logprobs"] = []
        meta["output_token_logprobs"] = [
            [lp, tok, None] for lp, tok in zip(request.logprobs, request.output_ids)]
    return {"text": text, "output_ids": list(request.output_ids), "meta_info": meta}


async def _wait(future) -> Any:
    return await asyncio.wrap_future(future)


# ---------------------------------------------------------------------- handlers
def build_app(state: ServerState) -> web.Application:
    scheduler = state.scheduler
    routes = web.RouteTableDef()

    async def run_requests(items: List[Request]) -> List[Request]:
        loop = asyncio.get_running_loop()
        futures = []
        submitted: List[Request] = []

        def done_callback(future):
            def on_done(finished: Request) -> None:
                loop.call_soon_threadsafe(
                    lambda: None if future.done() else future.set_result(finished))
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
            # invalid item, or the client went away: free the slots of what was queued
            for item in submitted:
                if not item.done:
                    scheduler.abort(item.rid)
            raise

    @routes.route("POST", protocol.GENERATE)
    @routes.route("PUT", protocol.GENERATE)
    async def generate(request: web.Request) -> web.Response:
        body = await _json_body(request)
        if body.get("stream"):
            return _error("stream=true is not supported by the swerve CPU server; "
                          "send a non-streaming request")
        input_ids = body.get("input_ids")
        if input_ids is None:
            return _error("input_ids is required: the swerve CPU server is token-in/token-out "
                          "(text prompts are not supported)")
        if not isinstance(input_ids, list) or not input_ids:
            return _error("input_ids must be a non-empty list of ints or of lists of ints")
        batch = isinstance(input_ids[0], list)
        prompts = input_ids if batch else [input_ids]
        try:
            params = _per_item(body.get("sampling_params"), len(prompts), batch, "sampling_params")
            rids = _per_item(body.get("rid"), len(prompts), batch, "rid")
            logprob_flags = _per_item(body.get("return_logprob"), len(prompts), batch,
                                      "return_logprob")
            items = []
            for prompt, param, rid, want_logprob in zip(prompts, params, rids, logprob_flags):
                item = Request(prompt_ids=[int(t) for t in prompt],
                               params=protocol.SamplingParams.from_json(param),
                               return_logprob=bool(want_logprob))
                if rid is not None:
                    item.rid = str(rid)
                items.append(item)
            finished = await run_requests(items)
        except PromptTooLong as error:
            return _error(str(error))
        except (ValueError, TypeError) as error:
            return _error(str(error))
        out = [_response(state, item) for item in finished]
        return web.json_response(out if batch else out[0])

    @routes.post(protocol.ABORT_REQUEST)
    async def abort_request(request: web.Request) -> web.Response:
        body = await _json_body(request, required=False)
        await _wait(scheduler.abort(str(body.get("rid") or ""), bool(body.get("abort_all"))))
        return web.Response(status=200)

    @routes.post(protocol.PAUSE_GENERATION)
    async def pause_generation(request: web.Request) -> web.Response:
        body = await _json_body(request, required=False)
        try:
            future = scheduler.pause(body.get("mode", protocol.PAUSE_ABORT))
        except ValueError as error:
            return _error(str(error))
        await _wait(future)
        return web.json_response({"message": "Generation paused successfully.", "status": "ok"})

    @routes.post(protocol.CONTINUE_GENERATION)
    async def continue_generation(request: web.Request) -> web.Response:
        await _wait(scheduler.resume())
        return web.json_response({"message": "Generation continued successfully.",
                                  "status": "ok"})

    @routes.route("GET", protocol.FLUSH_CACHE)
    @routes.route("POST", protocol.FLUSH_CACHE)
    async def flush_cache(request: web.Request) -> web.Response:
        ok = await _wait(scheduler.flush_cache())
        return web.Response(
            text="Cache flushed.\nPlease check backend logs for more details. "
                 "(When there are running or waiting requests, the operation will not be "
                 "performed.)\n",
            status=200 if ok else 400)

    @routes.post(protocol.UPDATE_WEIGHTS_FROM_DISK)
    async def update_weights_from_disk(request: web.Request) -> web.Response:
        body = await _json_body(request)
        model_path = body.get("model_path")
        version = body.get("weight_version")
        load_format = body.get("load_format")
        if not model_path:
            return web.json_response({"success": False, "message": "model_path is required",
                                      "num_paused_requests": 0}, status=400)
        if load_format not in (None, "auto", "safetensors"):
            return web.json_response(
                {"success": False, "num_paused_requests": 0,
                 "message": f"load_format {load_format!r} is not supported (safetensors only)"},
                status=400)
        try:
            state_dict = await asyncio.to_thread(load_safetensors_dir, model_path)
            paused, missing = await _wait(scheduler.update_weights(
                state_dict, None if version is None else str(version),
                bool(body.get("abort_all_requests", False))))
        except Exception as error:
            return web.json_response(
                {"success": False, "num_paused_requests": 0,
                 "message": f"Failed to update weights: {error}."}, status=400)
        message = "Succeeded to update model weights."
        if missing:
            message += f" {len(missing)} model tensors were not in the checkpoint: {missing[:5]}."
        if version is not None:
            message += f" Weight version updated to {version}."
        return web.json_response({"success": True, "message": message,
                                  "num_paused_requests": paused})

    @routes.post(protocol.UPDATE_WEIGHT_VERSION)
    async def update_weight_version(request: web.Request) -> web.Response:
        body = await _json_body(request)
        version = str(body.get("new_version", ""))
        if body.get("abort_all_requests"):
            await _wait(scheduler.abort("", True))
        await _wait(scheduler.set_weight_version(version))
        return web.json_response({"success": True,
                                  "message": f"Weight version updated to {version}",
                                  "new_version": version})

    @routes.get(protocol.GET_WEIGHT_VERSION)
    async def get_weight_version(request: web.Request) -> web.Response:
        return web.json_response({"weight_version": scheduler.weight_version})

    @routes.get(protocol.GET_MODEL_INFO)
    async def get_model_info(request: web.Request) -> web.Response:
        return web.json_response({
            "model_path": state.cfg.model_path, "tokenizer_path": state.cfg.model_path,
            "is_generation": True, "preferred_sampling_params": None,
            "weight_version": scheduler.weight_version})

    @routes.get(protocol.GET_SERVER_INFO)
    async def get_server_info(request: web.Request) -> web.Response:
        return web.json_response(server_info(state))

    @routes.get(protocol.GET_LOAD)
    async def get_load(request: web.Request) -> web.Response:
        stats = scheduler.stats()
        return web.json_response([{
            "dp_rank": 0, "num_reqs": stats["running"] + stats["waiting"],
            "num_waiting_reqs": stats["waiting"], "num_tokens": stats["kv_tokens"]}])

    @routes.get(protocol.HEALTH)
    async def health(request: web.Request) -> web.Response:
        return web.Response(status=200 if scheduler.stats()["alive"] else 503)

    @routes.get(protocol.HEALTH_GENERATE)
    async def health_generate(request: web.Request) -> web.Response:
        stats = scheduler.stats()
        if not stats["alive"]:
            return web.Response(status=503)
        # As SGLang: when the server is busy its progress is the proof of health; when
        # paused nothing may run, so a live scheduler thread is all we can check.
        if stats["paused"] or (stats["running"] and time.monotonic() - scheduler.last_step_time
                               < HEALTH_CHECK_TIMEOUT_S):
            return web.Response(status=200)
        probe = Request(prompt_ids=[0], params=protocol.SamplingParams(
            max_new_tokens=1, temperature=0.0), rid=f"HEALTH_CHECK_{time.time()}")
        try:
            await asyncio.wait_for(run_requests([probe]), HEALTH_CHECK_TIMEOUT_S)
        except Exception:
            return web.Response(status=503)
        return web.Response(status=200)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.add_routes(routes)
    app[STATE_KEY] = state
    return app


def server_info(state: ServerState) -> Dict[str, Any]:
    """SGLang's /get_server_info layout (server args + `internal_states`), CPU values.

    swerve reads the flat keys `num_running_reqs`, `num_waiting_reqs`, `token_usage`
    (fraction of the KV-token pool in use), `gen_throughput` (tokens/s over the last 5 s)
    and `weight_version`; SGLang keeps the same facts in `internal_states[0]`
    (`running_batch_size`, `waiting_queue_size`, `last_gen_throughput`).
    """
    stats = state.scheduler.stats()
    cfg = state.cfg
    internal = {
        "last_gen_throughput": stats["gen_throughput"],
        "memory_usage": {"kvcache": round(stats["kv_tokens"] * state.kv_bytes_per_token / 2**30, 6),
                         "token_capacity": stats["kv_capacity"]},
        "engine_paused": stats["paused"],
        "waiting_queue_size": stats["waiting"],
        "running_batch_size": stats["running"],
        "prefill_decode_size": stats["waiting"] + stats["running"],
        "token_usage": stats["kv_usage"],
        "num_used_tokens": stats["kv_tokens"],
        "prefix_cache_tokens": stats["prefix_cache_tokens"],
        "prefix_cache_hit_tokens": stats["prefix_cache_hit_tokens"],
    }
    return {
        "model_path": cfg.model_path,
        "tokenizer_path": cfg.model_path,
        "host": cfg.host,
        "port": cfg.port,
        "device": "cpu",
        "max_running_requests": cfg.max_batch_size,
        "context_length": cfg.max_context_tokens,
        "max_total_num_tokens": stats["kv_capacity"],
        "chunked_prefill_size": state.scheduler.max_prefill_tokens,
        "disable_radix_cache": True,
        "weight_version": stats["weight_version"],
        "internal_states": [internal],
        "version": SERVER_VERSION,
        # swerve flat keys
        "num_running_reqs": stats["running"],
        "num_waiting_reqs": stats["waiting"],
        "token_usage": stats["kv_usage"],
        "kv_cache_tokens": stats["kv_tokens"],
        "gen_throughput": stats["gen_throughput"],
        "total_generated_tokens": stats["total_generated_tokens"],
        "total_finished_requests": stats["total_finished_requests"],
        "uptime_s": time.time() - state.started,
    }


def load_safetensors_dir(model_path: str) -> Dict[str, torch.Tensor]:
    """Every tensor of a Hugging Face safetensors checkpoint directory (sharded or not)."""
    from safetensors.torch import load_file

    if not os.path.isdir(model_path):
        raise FileNotFoundError(f"no model directory at {model_path!r}")
    files = sorted(glob.glob(os.path.join(model_path, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {model_path!r}")
    tensors: Dict[str, torch.Tensor] = {}
    for path in files:
        tensors.update(load_file(path, device="cpu"))
    return tensors


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
    """Start a server in a background thread; port 0 (the default here) picks a free one."""
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
    ready.wait(60)
    if "error" in started:
        state.scheduler.stop()
        raise started["error"]
    state.cfg.port = started["port"]
    return ServerHandle(state, thread, loop, started["runner"], started["port"])


def serve(model_path: str, host: str = "127.0.0.1", port: int = 30000,
          max_batch_size: int = 16, max_context_tokens: int = 4096, **kwargs) -> None:
    """Run the server in this process until interrupted (SIGINT/SIGTERM)."""
    check_port_free(host, port)
    state = ServerState(ServerConfig(model_path=model_path, host=host, port=port,
                                     max_batch_size=max_batch_size,
                                     max_context_tokens=max_context_tokens, **kwargs))

    async def main_loop():
        import signal

        runner, real_port = await _start_site(state)
        state.cfg.port = real_port
        print(f"{READY_LINE} http://{host}:{real_port}", flush=True)
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


def build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m policies.server",
        description="swerve CPU inference server (a subset of SGLang's native HTTP API)")
    parser.add_argument("--model-path", required=True, help="Hugging Face model directory")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000, help="0 picks a free port")
    parser.add_argument("--max-batch-size", "--max-running-requests", dest="max_batch_size",
                        type=int, default=16)
    parser.add_argument("--max-context-tokens", "--context-length", dest="max_context_tokens",
                        type=int, default=4096)
    parser.add_argument("--max-total-tokens", type=int, default=None,
                        help="KV-token pool (default max_batch_size * max_context_tokens)")
    parser.add_argument("--max-prefill-tokens", "--chunked-prefill-size",
                        dest="max_prefill_tokens", type=int, default=None)
    parser.add_argument("--weight-version", default="0")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--prefix-cache-tokens", type=int, default=0,
                        help="KV tokens of finished requests kept for the next turn (0: off; "
                             "SGLang's radix cache plays this part)")
    parser.add_argument("--log-level", default="warning")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_arg_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper())
    try:
        serve(args.model_path, host=args.host, port=args.port, max_batch_size=args.max_batch_size,
              max_context_tokens=args.max_context_tokens, max_total_tokens=args.max_total_tokens,
              max_prefill_tokens=args.max_prefill_tokens, weight_version=args.weight_version,
              torch_threads=args.torch_threads, prefix_cache_tokens=args.prefix_cache_tokens)
    except (PortInUse, FileNotFoundError) as error:
        # Bad input, not a bug: one line that names the fix instead of a traceback.
        print(f"swerve cpu server: error: {error}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
