"""HTTP client for SGLang's native server API (and our CPU server, which speaks the same subset).

Standard library only. Every call is one short HTTP request with its own connection, so one
client is safe to use from many threads at once (an EngineActor is a threaded Ray actor).

JSON shapes follow SGLang's `http_server.py` / `io_struct.py`:
  POST /generate {"input_ids": [...], "sampling_params": {...}, "return_logprob": true, "rid": "..."}
       -> {"text": ..., "output_ids": [...], "meta_info": {"id", "finish_reason": {"type": ...},
           "prompt_tokens", "completion_tokens", "weight_version",
           "output_token_logprobs": [[logprob, token_id, text|null], ...]}}
  POST /abort_request {"rid": ...} | {"abort_all": true}
  POST /pause_generation {"mode": "abort"|"retract"|"in_place"}, POST /continue_generation {}
  POST /update_weights_from_disk {"model_path", "weight_version", "flush_cache", "abort_all_requests"}
  POST /init_weights_update_group {"master_address", "master_port", "rank_offset", "world_size",
       "group_name", "backend"}
  POST /update_weights_from_distributed {"names", "dtypes", "shapes", "group_name", "flush_cache",
       "weight_version"}
  GET  /server_info, /v1/loads {"loads": [{"token_usage", "num_used_tokens", ...} per DP rank]}, /health
"""
from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any, Optional, Sequence

from configs.schema import EngineConfig
from policies.sample_types import FINISH_ABORT, FINISH_LENGTH, FINISH_STOP, SampleOutput, SampleRequest
from policies.engines import protocol
from policies.engines.protocol import (ABORT_REQUEST, CONTINUE_GENERATION, GENERATE, HEALTH, LOADS,
                                      PAUSE_GENERATION, SERVER_INFO, UPDATE_WEIGHTS_FROM_DISK, WEIGHT_UPDATE_GROUP)

# GPU (NCCL) weight sync: SGLang routes our CPU server does not serve.
INIT_WEIGHTS_UPDATE_GROUP = "/init_weights_update_group"
UPDATE_WEIGHTS_FROM_DISTRIBUTED = "/update_weights_from_distributed"


class EngineHTTPError(RuntimeError):
    """The server answered with an error status (the request reached it)."""

    def __init__(self, path: str, status: int, body: str):
        super().__init__(f"{path} -> HTTP {status}: {body[:500]}")
        self.path, self.status, self.body = path, status, body


class EngineUnreachable(RuntimeError):
    """No answer at all: refused, reset, or timed out (the server may be dead)."""


def generate_body(request: SampleRequest, rid: str, max_new_tokens: Optional[int] = None,
                  prompt_ids: Optional[Sequence[int]] = None, seed: Optional[int] = None,
                  with_priority: bool = False) -> dict:
    """Token ids in, token ids out: stop on ids and keep the stop token (the trainer learns to stop);
    stop strings end generation too, at the first token whose text holds one (kept in output_ids).
    `with_priority` (engine.priority=age) sends the request's priority; a server without priority
    scheduling must not get one (SGLang may abort such a request)."""
    return protocol.generate_request(
        list(request.prompt_ids if prompt_ids is None else prompt_ids),
        max_new_tokens=request.max_new_tokens if max_new_tokens is None else max_new_tokens,
        temperature=request.temperature, top_p=request.top_p, stop_token_ids=list(request.stop_token_ids),
        stop=list(request.stop), rid=rid, return_logprob=True, skip_special_tokens=False, no_stop_trim=True,
        sampling_seed=request.seed if seed is None else seed,
        priority=request.priority if with_priority else None)


def parse_version(value: Any, default: int) -> int:
    """SGLang keeps weight_version a string ("default" until set); swerve's are integers."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def parse_generate(item: dict, fallback_version: int) -> SampleOutput:
    """One /generate response item -> SampleOutput (finish_reason 'stop', 'length' or 'abort').

    Per-token versions come from meta_info["weight_versions"] spans (SGLang >= 0.5.23, ours) or
    our older meta_info["output_token_weight_versions"] list, else every token gets
    meta_info["weight_version"] (else `fallback_version`): for such a server the actor's update
    protocol makes sure a response never spans a weight update (see EngineActor).
    """
    parsed = protocol.parse_generate_response(item)
    n = len(parsed.output_ids)
    if len(parsed.logprobs) != n:
        raise ValueError(f"/generate returned {n} output_ids but {len(parsed.logprobs)} output_token_logprobs "
                         "(was return_logprob honoured?)")
    version = parse_version(parsed.weight_version, fallback_version)
    if parsed.token_weight_versions is not None:
        versions = [parse_version(v, version) for v in parsed.token_weight_versions]
        if len(versions) != n:
            raise ValueError(f"output_token_weight_versions has {len(versions)} entries for {n} tokens")
    else:
        versions = [version] * n
    kind = parsed.finish_type
    reason = FINISH_STOP if kind == FINISH_STOP else FINISH_ABORT if kind == FINISH_ABORT else FINISH_LENGTH
    return SampleOutput(parsed.output_ids, parsed.logprobs, versions, reason)


class EngineClient:
    def __init__(self, base_url: str, timeout_s: float = EngineConfig.request_timeout_s):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    # -- transport ---------------------------------------------------------------------
    def request(self, method: str, path: str, body: Optional[dict] = None, timeout_s: Optional[float] = None):
        """Returns the parsed JSON answer (or its text, or None when empty)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raise EngineHTTPError(path, err.code, err.read().decode(errors="replace")) from err
        except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError, OSError) as err:
            raise EngineUnreachable(f"{method} {self.base_url}{path}: {err}") from err
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def post(self, path: str, body: Optional[dict] = None, timeout_s: Optional[float] = None):
        return self.request("POST", path, {} if body is None else body, timeout_s)

    def get(self, path: str, timeout_s: Optional[float] = None):
        return self.request("GET", path, None, timeout_s)

    # -- generation --------------------------------------------------------------------
    def generate_raw(self, body: dict, timeout_s: Optional[float] = None) -> dict:
        return self.post(GENERATE, body, timeout_s)

    def abort(self, rid: str) -> None:
        self.post(ABORT_REQUEST, protocol.abort_request(rid))

    def abort_all(self) -> None:
        self.post(ABORT_REQUEST, protocol.abort_request(abort_all=True))

    def pause_generation(self, mode: str = protocol.PAUSE_RETRACT) -> None:
        self.post(PAUSE_GENERATION, protocol.pause_generation_request(mode))

    def continue_generation(self) -> None:
        self.post(CONTINUE_GENERATION, {})

    # -- weights -----------------------------------------------------------------------
    def update_weights_from_disk(self, model_path: str, weight_version: Optional[str] = None,
                                 flush_cache: bool = True, abort_all_requests: bool = False) -> dict:
        body = protocol.update_weights_from_disk_request(model_path, weight_version, flush_cache=flush_cache,
                                                         abort_all_requests=abort_all_requests)
        return _checked(UPDATE_WEIGHTS_FROM_DISK, self.post(UPDATE_WEIGHTS_FROM_DISK, body))

    def init_weights_update_group(self, master_address: str, master_port: int, rank_offset: int,
                                  world_size: int, group_name: str = WEIGHT_UPDATE_GROUP,
                                  backend: str = "nccl") -> dict:
        body = {"master_address": master_address, "master_port": int(master_port), "rank_offset": int(rank_offset),
                "world_size": int(world_size), "group_name": group_name, "backend": backend}
        return _checked(INIT_WEIGHTS_UPDATE_GROUP, self.post(INIT_WEIGHTS_UPDATE_GROUP, body))

    def update_weights_from_distributed(self, names: Sequence[str], dtypes: Sequence[str],
                                        shapes: Sequence[Sequence[int]], weight_version: Optional[str] = None,
                                        group_name: str = WEIGHT_UPDATE_GROUP, flush_cache: bool = True) -> dict:
        body: dict[str, Any] = {"names": list(names), "dtypes": list(dtypes), "shapes": [list(s) for s in shapes],
                                "group_name": group_name, "flush_cache": flush_cache}
        if weight_version is not None:
            body["weight_version"] = weight_version
        return _checked(UPDATE_WEIGHTS_FROM_DISTRIBUTED, self.post(UPDATE_WEIGHTS_FROM_DISTRIBUTED, body))

    # -- state -------------------------------------------------------------------------
    def get_server_info(self, timeout_s: Optional[float] = None) -> dict:
        return self.get(SERVER_INFO, timeout_s)

    def loads(self, timeout_s: Optional[float] = None) -> dict:
        """SGLang's load snapshot: {"loads": [one per DP rank: token_usage, num_used_tokens, ...]}."""
        return self.get(LOADS, timeout_s)

    def health(self, timeout_s: float = 5.0) -> bool:
        try:
            self.get(HEALTH, timeout_s)
        except (EngineHTTPError, EngineUnreachable):
            return False
        return True


def _checked(path: str, answer) -> dict:
    if isinstance(answer, dict) and answer.get("success") is False:
        raise EngineHTTPError(path, 400, str(answer.get("message", answer)))
    return answer if isinstance(answer, dict) else {"success": True, "message": answer}
