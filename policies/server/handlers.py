"""The CPU server's HTTP handlers (aiohttp): SGLang's native endpoints over our scheduler.

Shapes and deviations from SGLang are documented in `protocol.py`; starting and stopping a
server is `app.py`.
"""
from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from typing import Any, Dict, List

from aiohttp import web

from policies.engines import protocol
from policies.server.detokenize import StopStrings
from policies.server.wire_http import note_usage, request_log_level, wire_middleware
from policies.server.openai_api import add_openai_routes, is_openai_path
from policies.server.request import PromptTooLong, Request
from policies.server.serving import error_response, json_body
from policies.server.serving import run_requests as serving_run_requests
from policies.server.state import ServerState, load_safetensors_dir

SERVER_VERSION = "swerve-cpu-0.1"
# /health_generate: a server that made progress this recently is healthy; else a probe gets this long.
HEALTH_CHECK_TIMEOUT_S = 20.0
# A /update_weights_from_disk or batched /generate body may be large (64 MiB).
MAX_BODY_BYTES = 64 * 1024 * 1024


# ---------------------------------------------------------------------- helpers
def _per_item(value: Any, count: int, batch: bool, name: str) -> List[Any]:
    if batch and isinstance(value, list):
        if len(value) != count:
            raise ValueError(f"{name} has {len(value)} entries for {count} prompts")
        return value
    if batch and name == "rid" and value is not None:
        raise ValueError("rid must be a list for a batch of input_ids")
    return [value] * count


def _stops(value: Any) -> List[str]:
    """SGLang's `sampling_params.stop`: a string or a list of them."""
    stops = [] if value is None else [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise ValueError("sampling_params.stop must be a non-empty string or a list of them")
    return stops


def _response(state: ServerState, request: Request) -> Dict[str, Any]:
    params = request.params
    text_ids = request.output_ids
    reason = request.finish_reason or {}
    matched = reason.get("matched")
    stop_token = reason.get("type") == protocol.FINISH_STOP and not isinstance(matched, str)
    if stop_token and not params.no_stop_trim and text_ids:
        text_ids = text_ids[:-1]
    text = ""
    if state.tokenizer is not None and text_ids:
        text = state.tokenizer.decode(text_ids, skip_special_tokens=params.skip_special_tokens)
    if isinstance(matched, str) and not params.no_stop_trim and matched in text:
        text = text[:text.find(matched)]  # as SGLang: the stop string is trimmed from the text, its tokens kept
    meta: Dict[str, Any] = {
        "id": request.rid,
        "finish_reason": reason,
        "prompt_tokens": len(request.prompt_ids),
        "completion_tokens": len(request.output_ids),
        "cached_tokens": 0,
        "weight_version": request.weight_version,
        "e2e_latency": max(request.finished_at - request.created, 0.0),
        protocol.OUTPUT_TOKEN_WEIGHT_VERSIONS: list(request.versions),
        protocol.WEIGHT_VERSIONS: protocol.version_spans(request.versions) or [
            {"version": str(request.weight_version), "start": 0, "end": 0}],
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
        return await serving_run_requests(scheduler, items)

    @routes.route("POST", protocol.GENERATE)
    @routes.route("PUT", protocol.GENERATE)
    async def generate(request: web.Request) -> web.Response:
        body = await json_body(request)
        if body.get("stream"):
            return error_response("stream=true is not supported by the swerve CPU server; "
                          "send a non-streaming request")
        input_ids = body.get("input_ids")
        if input_ids is None:
            return error_response("input_ids is required: the swerve CPU server is token-in/token-out "
                          "(text prompts are not supported)")
        if not isinstance(input_ids, list) or not input_ids:
            return error_response("input_ids must be a non-empty list of ints or of lists of ints")
        batch = isinstance(input_ids[0], list)
        prompts = input_ids if batch else [input_ids]
        try:
            params = _per_item(body.get("sampling_params"), len(prompts), batch, "sampling_params")
            rids = _per_item(body.get("rid"), len(prompts), batch, "rid")
            logprob_flags = _per_item(body.get("return_logprob"), len(prompts), batch,
                                      "return_logprob")
            priorities = _per_item(body.get("priority"), len(prompts), batch, "priority")
            items = []
            for prompt, param, rid, want_logprob, priority in zip(prompts, params, rids, logprob_flags, priorities):
                item = Request(prompt_ids=[int(t) for t in prompt],
                               params=protocol.SamplingParams.from_json(param),
                               return_logprob=bool(want_logprob),
                               priority=None if priority is None else int(priority))
                stops = _stops(dict(param or {}).get("stop"))
                if stops and state.tokenizer is not None:
                    item.stop_check = StopStrings(
                        lambda ids, skip=item.params.skip_special_tokens: state.tokenizer.decode(
                            ids, skip_special_tokens=skip), stops)
                if rid is not None:
                    item.rid = str(rid)
                items.append(item)
            finished = await run_requests(items)
        except PromptTooLong as error:
            return error_response(str(error))
        except (ValueError, TypeError) as error:
            return error_response(str(error))
        out = [_response(state, item) for item in finished]
        note_usage(request, sum(len(item.prompt_ids) for item in finished),
                   sum(len(item.output_ids) for item in finished))
        return web.json_response(out if batch else out[0])

    @routes.post(protocol.ABORT_REQUEST)
    async def abort_request(request: web.Request) -> web.Response:
        body = await json_body(request, required=False)
        await _wait(scheduler.abort(str(body.get("rid") or ""), bool(body.get("abort_all"))))
        return web.Response(status=200)

    @routes.post(protocol.PAUSE_GENERATION)
    async def pause_generation(request: web.Request) -> web.Response:
        body = await json_body(request, required=False)
        try:
            future = scheduler.pause(body.get("mode", protocol.PAUSE_ABORT))
        except ValueError as error:
            return error_response(str(error))
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
        body = await json_body(request)
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
        body = await json_body(request)
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

    @routes.get(protocol.SERVER_INFO)
    @routes.get(protocol.GET_SERVER_INFO)
    async def get_server_info(request: web.Request) -> web.Response:
        return web.json_response(server_info(state))

    @routes.get(protocol.LOADS)
    async def loads(request: web.Request) -> web.Response:
        return web.json_response(load_snapshot(state))

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

    add_openai_routes(routes, state)
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[
        wire_middleware(request_log_level(state.cfg.request_log_level), is_openai_path)])
    app.add_routes(routes)
    return app


def load_snapshot(state: ServerState) -> Dict[str, Any]:
    """SGLang's GET /v1/loads layout (one LoadSnapshot per DP rank; we have one), its core fields."""
    stats = state.scheduler.stats()
    return {"timestamp": datetime.now(timezone.utc).isoformat(), "version": SERVER_VERSION, "accelerator": None,
            "num_accelerators": 0,
            "loads": [{"timestamp": time.time(), "dp_rank": 0, "num_running_reqs": stats["running"],
                       "num_waiting_reqs": stats["waiting"], "num_used_tokens": stats["kv_tokens"],
                       "max_total_num_tokens": stats["kv_capacity"], "max_running_requests": state.cfg.max_batch_size,
                       "token_usage": stats["kv_usage"], "gen_throughput": stats["gen_throughput"]}]}


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
