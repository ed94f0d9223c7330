"""The HTTP protocol of swerve's CPU inference server: a subset of SGLang's native API.

One client speaks to a real SGLang server (GPU) and to ours (CPU, CI), so every JSON shape
here is SGLang's, checked against `python/sglang/srt/entrypoints/http_server.py` and
`python/sglang/srt/managers/io_struct.py` (SGLang 0.5.x). Names in docstrings are SGLang's.

Request (`POST /generate`, SGLang `GenerateReqInput`), fields this server reads:
    {"input_ids": [int, ...] | [[int, ...], ...],   # a list of lists is a batch
     "sampling_params": {"max_new_tokens": int = 128, "temperature": float = 1.0,
                         "top_p": float = 1.0, "top_k": -1, "stop_token_ids": [int],
                         "stop": str | [str] (ends at the first token whose text holds one),
                         "ignore_eos": bool = False, "skip_special_tokens": bool = True,
                         "no_stop_trim": bool = False, "sampling_seed": int | None},
     "return_logprob": bool = False, "rid": str | [str] | None, "stream": false}
  `text` prompts are refused (the trainer is token-in/token-out); `stream: true` is refused
  (400) by the CPU server; unknown fields are ignored, as SGLang's dataclass parsing would
  reject them only for typos the client never sends.

Response (SGLang `TokenizerManager` output dict; a batch request returns a list of them):
    {"text": str, "output_ids": [int, ...],
     "meta_info": {"id": rid,
                   "finish_reason": {"type": "stop", "matched": token_id}
                                  | {"type": "length", "length": n}
                                  | {"type": "abort", "message": str},
                   "prompt_tokens": int, "completion_tokens": int, "cached_tokens": 0,
                   "weight_version": str,
                   "e2e_latency": float,
                   # only when return_logprob: SGLang's (logprob, token_id, text|None)
                   # triples (text is None: return_text_in_logprobs is not supported)
                   "output_token_logprobs": [[float, int, None], ...],
                   "input_token_logprobs": [],   # logprob_start_len is not supported
                   # SGLang >= 0.5.23: the weight version of each run of output tokens,
                   # half-open [start, end) spans in order; weight_version is the last one's
                   "weight_versions": [{"version": str, "start": int, "end": int}, ...],
                   # swerve's older per-token list, still sent for older clients
                   "output_token_weight_versions": [int | str, ...]}}
  `output_ids` keeps a matched stop/EOS token (the trainer must learn to stop); `text` trims
  it unless `no_stop_trim`, as SGLang's detokenizer does. Errors (prompt too long, bad
  params) answer HTTP 400 with SGLang's `_create_error_response` body
  `{"error": {"message": str}}`.

Per-token versions: SGLang (0.5.23 on) reports `meta_info.weight_versions`, spans of output
tokens each generated under one version; our server sends those and swerve's older per-token
list `output_token_weight_versions`. `token_weight_versions` reads the spans, else the list; a
server with neither (older SGLang) reports only `meta_info.weight_version`, and the client tags
tokens from its own pause/update bookkeeping. Versions come back as ints when the weight version
string is a decimal integer (swerve's policy versions are), else the string itself.

Weight sync sequence (ANCHORS "Weight sync"):
    POST /pause_generation {"mode": "in_place"|"retract"}   # keep in-flight requests
    POST /update_weights_from_disk {"model_path": dir, "weight_version": "7"}
    POST /continue_generation {}
NOTE: SGLang's `PauseGenerationReqInput.mode` defaults to "abort" (abort every request,
then pause). The CPU server has the same default; send "in_place" (keep the KV cache) or
"retract" (drop KV, recompute on continue with the new weights) to keep in-flight requests.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

from policies.sample_types import FINISH_ABORT, FINISH_LENGTH, FINISH_STOP  # noqa: F401 (protocol.FINISH_*)

# ---- endpoint paths (SGLang `http_server.py` routes) ----
GENERATE = "/generate"                                   # POST (SGLang also PUT)
ABORT_REQUEST = "/abort_request"                         # POST AbortReq
PAUSE_GENERATION = "/pause_generation"                   # POST PauseGenerationReqInput
CONTINUE_GENERATION = "/continue_generation"             # POST ContinueGenerationReqInput
FLUSH_CACHE = "/flush_cache"                             # GET or POST
UPDATE_WEIGHTS_FROM_DISK = "/update_weights_from_disk"   # POST UpdateWeightFromDiskReqInput
UPDATE_WEIGHT_VERSION = "/update_weight_version"         # POST UpdateWeightVersionReqInput
SERVER_INFO = "/server_info"                             # GET (SGLang >= 0.5.23; what swerve calls)
GET_SERVER_INFO = "/get_server_info"                     # GET (deprecated by SGLang for /server_info; still served)
LOADS = "/v1/loads"                                      # GET: {"loads": [LoadSnapshot per DP rank]}
GET_MODEL_INFO = "/get_model_info"                       # GET
GET_WEIGHT_VERSION = "/get_weight_version"               # GET
GET_LOAD = "/get_load"                                   # GET
HEALTH = "/health"                                       # GET
HEALTH_GENERATE = "/health_generate"                     # GET (runs a 1-token generation)

# ---- finish reasons (SGLang schedule_batch.FINISH_* .to_json()["type"]) ----
# Defined once in policies/sample_types.py (a SampleOutput's finish_reason is the wire's type):
# FINISH_STOP    FINISH_MATCHED_TOKEN: {"type": "stop", "matched": token_id}
# FINISH_LENGTH  FINISH_LENGTH: {"type": "length", "length": n}
# FINISH_ABORT   FINISH_ABORT: {"type": "abort", "message": str}

# ---- pause modes (SGLang PauseGenerationReqInput.mode) ----
PAUSE_ABORT = "abort"          # SGLang's default: abort all requests, then pause
PAUSE_IN_PLACE = "in_place"    # stop scheduling; running requests keep their KV cache
PAUSE_RETRACT = "retract"      # stop scheduling; running requests go back to the queue
PAUSE_MODES = (PAUSE_ABORT, PAUSE_RETRACT, PAUSE_IN_PLACE)

# ---- NCCL weight sync (SGLang /init_weights_update_group, /update_weights_from_distributed;
# the CPU server does not serve them) ----
# The process group's name: the trainer (policies/engines/weight_broadcast.py) and every engine must use
# the same one, as the group's store keys are prefixed by it.
WEIGHT_UPDATE_GROUP = "weight_update_group"

# ---- swerve extensions (absent from SGLang responses) ----
OUTPUT_TOKEN_WEIGHT_VERSIONS = "output_token_weight_versions"
WEIGHT_VERSIONS = "weight_versions"

DEFAULT_MAX_NEW_TOKENS = 128   # SGLang SamplingParams default


@dataclass
class SamplingParams:
    """The subset of SGLang `SamplingParams` the CPU server honours."""

    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1                      # only -1 (disabled) is supported on CPU
    stop_token_ids: List[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    sampling_seed: Optional[int] = None

    @classmethod
    def from_json(cls, data: Optional[Dict[str, Any]]) -> "SamplingParams":
        data = dict(data or {})
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data and data[k] is not None}
        params = cls(**known)
        params.stop_token_ids = [int(t) for t in (params.stop_token_ids or [])]
        return params


@dataclass
class GenerateReqInput:
    """SGLang `GenerateReqInput`, token-in only (`input_ids`, not `text`)."""

    input_ids: Union[List[int], List[List[int]]]
    sampling_params: Union[Dict[str, Any], List[Dict[str, Any]], None] = None
    rid: Union[str, List[str], None] = None
    return_logprob: Union[bool, List[bool], None] = None
    # Larger is served first by a server started with --enable-priority-scheduling (SGLang).
    priority: Optional[int] = None
    stream: bool = False

    def to_json(self) -> Dict[str, Any]:
        body = {k: v for k, v in asdict(self).items() if v is not None}
        if not self.stream:
            body.pop("stream", None)
        return body


def generate_request(
    input_ids: List[int],
    *,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    temperature: float = 1.0,
    top_p: float = 1.0,
    stop_token_ids: Optional[List[int]] = None,
    stop: Sequence[str] = (),
    rid: Optional[str] = None,
    return_logprob: bool = True,
    skip_special_tokens: bool = True,
    no_stop_trim: bool = False,
    sampling_seed: Optional[int] = None,
    priority: Optional[int] = None,
) -> Dict[str, Any]:
    """The JSON body of one `POST /generate` (works against SGLang and the CPU server)."""
    params: Dict[str, Any] = {
        "max_new_tokens": int(max_new_tokens), "temperature": float(temperature),
        "top_p": float(top_p), "skip_special_tokens": skip_special_tokens,
        "no_stop_trim": no_stop_trim,
    }
    if stop_token_ids:
        params["stop_token_ids"] = [int(t) for t in stop_token_ids]
    if stop:  # absent when none: a body without stop strings is what it was before they were sent
        params["stop"] = list(stop)
    if sampling_seed is not None:
        params["sampling_seed"] = int(sampling_seed)
    return GenerateReqInput(
        input_ids=[int(t) for t in input_ids], sampling_params=params, rid=rid,
        return_logprob=return_logprob, priority=None if priority is None else int(priority),
    ).to_json()


def abort_request(rid: str = "", abort_all: bool = False) -> Dict[str, Any]:
    """SGLang `AbortReq` body. The server answers 200 with an empty body (as SGLang does);
    the aborted `/generate` call returns its partial output with finish_reason "abort"."""
    return {"rid": rid, "abort_all": bool(abort_all)}


def pause_generation_request(mode: str = PAUSE_IN_PLACE) -> Dict[str, Any]:
    """SGLang `PauseGenerationReqInput` body. Defaults here to "in_place" (keep requests);
    a body without `mode` means SGLang's default "abort". Response:
    {"message": "Generation paused successfully.", "status": "ok"}."""
    if mode not in PAUSE_MODES:
        raise ValueError(f"pause mode must be one of {PAUSE_MODES}, got {mode!r}")
    return {"mode": mode}


def update_weights_from_disk_request(
    model_path: str, weight_version: Optional[str] = None, *,
    abort_all_requests: bool = False, flush_cache: bool = True,
) -> Dict[str, Any]:
    """SGLang `UpdateWeightFromDiskReqInput` body. Response (`UpdateWeightFromDiskReqOutput`):
    {"success": bool, "message": str, "num_paused_requests": int}; HTTP 400 when not success."""
    body: Dict[str, Any] = {"model_path": model_path, "abort_all_requests": abort_all_requests,
                            "flush_cache": flush_cache}
    if weight_version is not None:
        body["weight_version"] = str(weight_version)
    return body


@dataclass
class GenerateOutput:
    """A parsed `/generate` response item (SGLang's or ours)."""

    rid: str
    text: str
    output_ids: List[int]
    logprobs: List[float]
    finish_type: str              # FINISH_STOP | FINISH_LENGTH | FINISH_ABORT
    finish_reason: Dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    weight_version: Optional[str]
    # Per-token weight versions when the server reports them (swerve extension), else None.
    token_weight_versions: Optional[List[Union[int, str]]]


def parse_generate_response(item: Dict[str, Any]) -> GenerateOutput:
    """Parse one response dict. Token ids come from `output_ids`, else from
    `output_token_logprobs` (SGLang versions that omit `output_ids`)."""
    meta = item.get("meta_info", {})
    token_logprobs = meta.get("output_token_logprobs") or []
    output_ids = item.get("output_ids")
    if output_ids is None:
        output_ids = [int(entry[1]) for entry in token_logprobs]
    finish = meta.get("finish_reason") or {}
    if isinstance(finish, str):  # some SGLang versions/openai layers flatten it
        finish = {"type": finish}
    return GenerateOutput(
        rid=str(meta.get("id", "")),
        text=item.get("text", ""),
        output_ids=[int(t) for t in output_ids],
        logprobs=[float(entry[0]) for entry in token_logprobs],
        finish_type=str(finish.get("type", "")),
        finish_reason=finish,
        prompt_tokens=int(meta.get("prompt_tokens", 0)),
        completion_tokens=int(meta.get("completion_tokens", len(output_ids))),
        weight_version=meta.get("weight_version"),
        token_weight_versions=token_weight_versions(item),
    )


def token_weight_versions(item: Dict[str, Any]) -> Optional[List[Union[int, str]]]:
    """Each output token's weight version: from SGLang's spans, else swerve's per-token list;
    None when the server reports neither (older SGLang)."""
    meta = item.get("meta_info", {})
    spans = meta.get(WEIGHT_VERSIONS)
    if spans is not None:
        count = item.get("output_ids")
        count = len(count) if count is not None else len(meta.get("output_token_logprobs") or [])
        return spans_to_tokens(spans, count)
    versions = meta.get(OUTPUT_TOKEN_WEIGHT_VERSIONS)
    return None if versions is None else list(versions)


def version_spans(versions: List[Union[int, str]]) -> List[Dict[str, Any]]:
    """Per-token versions -> SGLang's spans [{"version": str, "start", "end"}] (one empty span at
    0 for no tokens, as SGLang writes)."""
    spans: List[Dict[str, Any]] = []
    for i, version in enumerate(versions):
        if spans and spans[-1]["version"] == str(version):
            spans[-1]["end"] = i + 1
        else:
            spans.append({"version": str(version), "start": i, "end": i + 1})
    return spans


def spans_to_tokens(spans: List[Dict[str, Any]], count: int) -> List[Union[int, str]]:
    """SGLang's spans -> one version per output token. They must tile [0, count) in order:
    anything else would tag some token with a version that did not produce it."""
    versions: List[Union[int, str]] = []
    for span in spans:
        start, end = int(span["start"]), int(span["end"])
        if start != len(versions) or end < start:
            raise ValueError(f"weight_versions spans do not tile the output in order: {spans}")
        versions += [version_tag(span["version"])] * (end - start)
    if len(versions) != count:
        raise ValueError(f"weight_versions spans cover {len(versions)} tokens of {count}: {spans}")
    return versions


def version_tag(weight_version: str) -> Union[int, str]:
    """How one weight version appears per token (`output_token_weight_versions`, expanded spans)."""
    text = str(weight_version).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    return text


def error_body(message: str) -> Dict[str, Any]:
    """SGLang `_create_error_response` body (HTTP 400)."""
    return {"error": {"message": message}}
