"""Our SGLang launch flags, HTTP bodies and response reads, checked against SGLang's own code.

SGLang 0.5.23 sits in a side install (`make sglang-side`, policies/engines/sglang_side.py), no
GPU and no CUDA packages needed. What can be read is read from its installed source with `ast`
(request dataclasses, HTTP routes, the keys its response builders write). What must run (its
CLI parser, the generated JSON contract `sglang.api.v1.api_types` that http_server.py applies to
every /generate body, its SamplingParams) runs once per module in a subprocess
(tests/policies/engines/sglang_probe.py): importing SGLang installs a triton placeholder and
reconfigures logging, which must not leak into the pytest process. Every expected set comes from SGLang's files, none is a copy here.
"""
from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
import typing

import pytest

from configs.schema import EngineConfig
from policies.sample_types import SampleRequest, age_priority
from policies.engines import client, process, protocol, sglang_side
from policies.server.app import start_server
from tests.policies.engines.sglang_source import keys_read, sglang_routes

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
IO_STRUCT = "srt/managers/io_struct.py"
API_TYPES = "api/v1/api_types.py"
SAMPLING = "srt/sampling/sampling_params.py"
# Files that build the /generate response dict (meta_info, finish reasons, version spans).
GENERATE_WRITERS = ("srt/managers/tokenizer_manager.py", "srt/managers/schedule_batch.py",
                    "srt/utils/weight_versions.py")
# Files that build /get_server_info: the route, server args + scheduler info, internal_states.
SERVER_INFO_WRITERS = ("srt/entrypoints/http_server.py", "srt/utils/common.py", "srt/entrypoints/engine.py",
                       "srt/managers/scheduler.py", "srt/managers/scheduler_components/internal_state.py")
# GET /v1/loads: the route (its top-level keys) and the per-DP-rank snapshot it returns.
LOADS_WRITER = "srt/entrypoints/v1_loads.py"
LOAD_SNAPSHOT = "srt/managers/load_snapshot.py"
MODEL = "/models/policy"


def _missing() -> str | None:
    try:
        sglang_side.side_dir()
    except sglang_side.SGLangSideMissing as err:
        return str(err)
    return None


MISSING = _missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")

LAUNCH_CASES = {
    "defaults": EngineConfig(backend="sglang"),
    "age-priority": EngineConfig(backend="sglang", priority="age"),
    "tp2-32k-mem0.7": EngineConfig(backend="sglang", tp_size=2, max_context_tokens=32768, mem_fraction=0.7),
    "tp1-2k-mem0.9-server-args": EngineConfig(backend="sglang", tp_size=1, max_context_tokens=2048,
                                              mem_fraction=0.9, server_args=["--log-level", "warning"]),
}
LAUNCH_PORTS = {name: 30001 + i for i, name in enumerate(LAUNCH_CASES)}

# (request, generate_body keyword overrides): budget from the request or overridden, greedy and
# sampled, seeded or not, with and without stop token ids or stop strings, prompt override.
GENERATE_CASES = {
    "greedy": (SampleRequest([5, 6, 7], max_new_tokens=4, temperature=0.0), {}),
    "sampled-seeded": (SampleRequest([5, 6, 7, 8], max_new_tokens=5, temperature=0.8, top_p=0.9, seed=11), {}),
    "stop-ids-budget-override": (SampleRequest([9, 10], max_new_tokens=50, temperature=1.0, stop_token_ids=(2, 3)),
                                 {"max_new_tokens": 3}),
    # A harness's stop strings (SampleRequest.stop -> sampling_params.stop).
    "stop-strings": (SampleRequest([5, 6, 7], max_new_tokens=6, temperature=1.0, seed=2, stop=("ab", "\n\n")), {}),
    "prompt-and-seed-override": (SampleRequest([1], max_new_tokens=2), {"prompt_ids": [4, 4, 4], "seed": 3}),
    # engine.priority=age: straggler-first (an age priority, policies/sample_types.age_priority).
    "age-priority": (SampleRequest([5, 6], max_new_tokens=3, priority=age_priority(3, 1.8e9)), {"with_priority": True}),
}


def launch_argv(name: str) -> list[str]:
    cmd = process.server_command(LAUNCH_CASES[name], MODEL, LAUNCH_PORTS[name])
    at = cmd.index("sglang.launch_server")
    assert cmd[at - 1] == "-m", cmd
    return cmd[at + 1:]


def generate_bodies() -> dict[str, dict]:
    return {name: client.generate_body(req, rid=f"rid-{name}", **kw) for name, (req, kw) in GENERATE_CASES.items()}


class _Recorder(client.EngineClient):
    """EngineClient whose transport records (method, path, body) instead of sending."""

    def __init__(self):
        super().__init__("http://recorder.invalid")
        self.calls: list[tuple[str, str, object]] = []

    def request(self, method, path, body=None, timeout_s=None):
        self.calls.append((method, path, body))
        return {"success": True}


def client_calls() -> list[tuple[str, str, object]]:
    """Every request EngineClient makes, through its public methods, with varied arguments."""
    rec = _Recorder()
    rec.generate_raw(generate_bodies()["greedy"])
    rec.abort("rid-1")
    rec.abort_all()
    rec.pause_generation()
    for mode in protocol.PAUSE_MODES:
        rec.pause_generation(mode)
    rec.continue_generation()
    rec.update_weights_from_disk("/weights/v3", "3")
    rec.update_weights_from_disk("/weights/v4", None, flush_cache=False, abort_all_requests=True)
    rec.init_weights_update_group("127.0.0.1", 29500, 1, 3)
    rec.update_weights_from_distributed(["w"], ["bfloat16"], [[2, 3]], weight_version="5")
    rec.update_weights_from_distributed(["w", "b"], ["float32", "float32"], [[4], [1]], flush_cache=False)
    rec.get_server_info()
    rec.loads()
    rec.health()
    return rec.calls


CONTROL_CALLS = [c for c in client_calls() if c[0] == "POST" and c[1] != protocol.GENERATE]


@pytest.fixture(scope="module")
def served(model_path):
    """Our CPU server's answers: every GENERATE_CASES body, one that stops on a stop id, one on a stop
    string, /server_info, /v1/loads."""
    bodies = generate_bodies()
    with start_server(model_path, max_batch_size=4, max_context_tokens=128) as handle:
        engine = client.EngineClient(handle.url, timeout_s=120)
        responses = {name: engine.generate_raw(body) for name, body in bodies.items()}
        first = responses["greedy"]["output_ids"][0]
        bodies["stop-on-first-greedy-token"] = client.generate_body(
            SampleRequest([5, 6, 7], max_new_tokens=4, temperature=0.0, stop_token_ids=(first,)), rid="rid-stop")
        responses["stop-on-first-greedy-token"] = engine.generate_raw(bodies["stop-on-first-greedy-token"])
        # A stop string the greedy reply holds at once: the answer's finish_reason matches a string.
        text = responses["greedy"]["text"]
        assert text, responses["greedy"]
        bodies["stop-string-in-greedy-text"] = client.generate_body(
            SampleRequest([5, 6, 7], max_new_tokens=4, temperature=0.0, stop=(text[:1],)), rid="rid-stop-string")
        responses["stop-string-in-greedy-text"] = engine.generate_raw(bodies["stop-string-in-greedy-text"])
        assert responses["stop-string-in-greedy-text"]["meta_info"]["finish_reason"] == {"type": "stop",
                                                                                           "matched": text[:1]}
        info = engine.get_server_info()
        loads = engine.loads()
    with open(os.path.join(model_path, "config.json")) as f:
        vocab_size = json.load(f)["vocab_size"]
    return {"bodies": bodies, "responses": responses, "server_info": info, "loads": loads, "vocab_size": vocab_size,
            "model_path": model_path}


@pytest.fixture(scope="module")
def probe(served):
    payload = {"launch": {name: launch_argv(name) for name in LAUNCH_CASES},
               "fields": ["model_path", "tp_size", "context_length", "mem_fraction_static", "host", "port",
                          "weight_version", "log_level", "base_gpu_id", "gpu_id_step", "dp_size", "pp_size",
                          "nnodes", "enable_priority_scheduling", "schedule_low_priority_values_first",
                          "schedule_policy", "priority_scheduling_preemption_threshold", "skip_tokenizer_init"],
               "generate": served["bodies"], "responses": served["responses"], "model_path": served["model_path"],
               "server_info": served["server_info"], "vocab_size": served["vocab_size"],
               "abort": [body for method, path, body in CONTROL_CALLS if path == protocol.ABORT_REQUEST]}
    proc = subprocess.run([sys.executable, "-m", "tests.policies.engines.sglang_probe"], input=json.dumps(payload),
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE-JSON ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1][len("PROBE-JSON "):])


# ---- a. launch command -------------------------------------------------------------------------

@pytest.mark.parametrize("name", LAUNCH_CASES)
def test_launch_command_parses_with_sglangs_own_parser(probe, name):
    """server_command's arguments after `-m sglang.launch_server` pass SGLang's
    prepare_server_args (the launcher's own parse), every flag is an exact SGLang flag (not an
    argparse abbreviation), and each value we pass comes back in ServerArgs as SGLang's parser
    converts it."""
    result = probe["launch"][name]
    assert result["error"] is None, f"SGLang rejects {launch_argv(name)}: {result['error']}"
    assert result["checks"], "no flags were checked"
    for check in result["checks"]:
        assert check["dest"] is not None, f"{check['flag']} is not an SGLang {sglang_side.SGLANG_VERSION} flag"
        assert check["got"] == check["expected"], check


@pytest.mark.parametrize("name", LAUNCH_CASES)
def test_launch_flags_set_the_server_args_we_mean(probe, name):
    """Each EngineConfig setting lands in the ServerArgs field it is meant for (tp_size,
    context_length, mem_fraction_static, host, port, model_path, extra server_args), and the
    weight version SGLang starts with is one our client reads as policy version 0. The server
    uses exactly tp_size GPUs from the first one it sees (one node, no data or pipeline
    parallel, base_gpu_id 0, step 1): process.server_env gives it exactly those."""
    result = probe["launch"][name]
    assert result["error"] is None, f"SGLang rejects {launch_argv(name)}: {result['error']}"
    cfg, values = LAUNCH_CASES[name], result["values"]
    assert {"model_path": values["model_path"], "tp_size": values["tp_size"],
            "context_length": values["context_length"], "mem_fraction_static": values["mem_fraction_static"],
            "host": values["host"], "port": values["port"]} == {
        "model_path": MODEL, "tp_size": cfg.tp_size, "context_length": cfg.max_context_tokens,
        "mem_fraction_static": cfg.mem_fraction, "host": process.ENGINE_HOST, "port": LAUNCH_PORTS[name]}
    assert {k: values[k] for k in ("base_gpu_id", "gpu_id_step", "dp_size", "pp_size", "nnodes")} == {
        "base_gpu_id": 0, "gpu_id_step": 1, "dp_size": 1, "pp_size": 1, "nnodes": 1}
    assert "weight_version" in probe["server_args_fields"]
    assert client.parse_version(values["weight_version"], -1) == 0
    # The server keeps its tokenizer: SGLang refuses a request's stop strings without one (a harness's).
    assert values["skip_tokenizer_init"] is False
    if "--log-level" in cfg.server_args:
        assert values["log_level"] == cfg.server_args[cfg.server_args.index("--log-level") + 1]
    # engine.priority=age: SGLang schedules by priority, larger first (its default sense), and
    # preempts at our threshold; fifo leaves priority scheduling off (and sends no priorities).
    assert values["enable_priority_scheduling"] == (cfg.priority == "age")
    if cfg.priority == "age":
        assert values["schedule_low_priority_values_first"] is False and values["schedule_policy"] in ("fcfs", "lof")
        assert values["priority_scheduling_preemption_threshold"] == cfg.priority_preemption_threshold


# ---- b. request bodies ----------------------------------------------------------------------

def test_generate_bodies_pass_sglangs_http_contract(probe, served):
    """Every /generate body generate_body builds passes the contract check SGLang's /generate
    route runs before anything else (api_contract.generate_contract_error: unknown sampling_params
    keys and wrong types are HTTP 400 there)."""
    assert probe["generate_contract"] == {name: None for name in served["bodies"]}


def test_generate_body_keys_are_sglang_request_fields(served):
    """Every top-level key of our /generate bodies is a field of the class SGLang's /generate route
    parses the body into (GenerateReqInput; it ignores unknown keys, as the contract check does),
    and every sampling_params key is a field of both SGLang's SamplingParams (what the tokenizer
    manager builds from it) and the public contract's SamplingParams."""
    route = sglang_routes()[protocol.GENERATE]
    assert "POST" in route["methods"] and route["body"] is not None, route
    request_fields = sglang_side.class_fields(IO_STRUCT, route["body"])
    sampling_fields = set(sglang_side.class_fields(SAMPLING, "SamplingParams"))
    sampling_fields &= set(sglang_side.class_fields(API_TYPES, "SamplingParams"))
    for name, body in served["bodies"].items():
        assert set(body) <= set(request_fields), (name, set(body) - set(request_fields))
        assert set(body["sampling_params"]) <= sampling_fields, (name, set(body["sampling_params"]) - sampling_fields)


def test_sampling_params_build_as_the_tokenizer_manager_does(probe, served):
    """SGLang's SamplingParams(**sampling_params), normalize and verify (what TokenizerManager
    does with each request) accept every body, and each value we send comes back (temperature 0
    becomes SGLang's greedy: top_k 1)."""
    for name, body in served["bodies"].items():
        result = probe["sampling"][name]
        assert result["error"] is None, (name, result["error"])
        for key, sent in body["sampling_params"].items():
            got = result["values"][key]
            if key == "temperature" and sent == 0:
                assert result["top_k"] == 1, (name, result)
            elif key == "stop_token_ids":
                assert sorted(got) == sorted(sent), (name, key)
            else:
                assert got == sent, (name, key, got, sent)


def test_generate_req_input_constructs_and_normalizes(probe, served):
    """GenerateReqInput(**body).normalize_batch_and_arguments() accepts every body, as the
    /generate route does. Needs sglang.srt.managers.io_struct to import (it pulls SGLang's VL
    model configs, which need torchvision and transformers' AutoProcessor)."""
    result = probe["generate_req_input"]
    if "import_error" in result:
        pytest.skip(f"sglang.srt.managers.io_struct does not import here: {result['import_error']}")
    assert result == {name: None for name in served["bodies"]}


@pytest.mark.parametrize("call", CONTROL_CALLS, ids=[f"{c[1].strip('/')}-{i}" for i, c in enumerate(CONTROL_CALLS)])
def test_control_bodies_are_fields_of_the_routes_request_class(call):
    """Each control body the client POSTs uses only fields of the request class SGLang's route
    for that path parses it into (found by reading the route), and sends every required one.
    These classes ignore unknown keys, so a misspelt one would be dropped without an error."""
    method, path, body = call
    route = sglang_routes().get(path)
    assert route is not None and method in route["methods"], f"SGLang has no {method} {path}"
    assert route["body"] is not None, f"SGLang's {path} takes no request body class"
    fields = sglang_side.class_fields(IO_STRUCT, route["body"])
    required = {name for name, node in fields.items() if node.value is None}
    assert set(body) <= set(fields), (route["body"], set(body) - set(fields))
    assert required <= set(body), (route["body"], required - set(body))


def test_pause_modes_are_sglangs(probe):
    """The pause modes the client and engine.pause_mode can send are values of SGLang's
    PauseGenerationReqInput.mode Literal; our abort bodies pass the public AbortRequest contract."""
    mode = sglang_side.class_fields(IO_STRUCT, "PauseGenerationReqInput")["mode"].annotation
    assert isinstance(mode, ast.Subscript) and ast.unparse(mode.value) == "Literal"
    allowed = set(ast.literal_eval(mode.slice))
    ours = set(protocol.PAUSE_MODES) | set(typing.get_args(typing.get_type_hints(EngineConfig)["pause_mode"]))
    assert ours <= allowed, ours - allowed
    assert probe["abort_contract"] and probe["abort_contract"] == [None] * len(probe["abort_contract"])


def test_client_paths_are_sglang_routes():
    """Every (method, path) EngineClient requests is a route of SGLang's HTTP server, and the
    recorder above exercises every path client.py names in a post/get call."""
    routes = sglang_routes()
    calls = client_calls()
    for method, path, _ in calls:
        assert path in routes and method in routes[path]["methods"], f"SGLang has no {method} {path}"
    named = set()
    for node in ast.walk(ast.parse(inspect.getsource(client))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("post", "get")
                and node.args and isinstance(node.args[0], ast.Name)):
            named.add(getattr(client, node.args[0].id))
    assert named and named <= {path for _, path, _ in calls}, named - {path for _, path, _ in calls}


# ---- c. responses -----------------------------------------------------------------------------

def test_generate_keys_we_read_are_written_by_sglang():
    """Every key our /generate parser reads (from its source) is a string SGLang's response
    builders write, except swerve's own per-token version list, which SGLang's response contract
    does not have (the parser falls back to meta_info.weight_version without it)."""
    read = keys_read(protocol.parse_generate_response) | keys_read(protocol.token_weight_versions)
    written = set().union(*(sglang_side.string_literals(path) for path in GENERATE_WRITERS))
    assert read - {protocol.OUTPUT_TOKEN_WEIGHT_VERSIONS} <= written, read - written
    assert protocol.OUTPUT_TOKEN_WEIGHT_VERSIONS not in sglang_side.class_fields(API_TYPES, "GenerateMetaInfo")


def test_cpu_server_responses_pass_sglangs_response_contract(probe, served):
    """Our CPU server's /generate answers decode with SGLang's GenerateResponse contract (same
    nesting and types: meta_info, [logprob, token_id, text] entries, a tagged finish_reason), and
    parse_generate reads the same sample from SGLang's re-encoding as from our raw answer."""
    finishes = set()
    for name, raw in served["responses"].items():
        result = probe["responses"][name]
        assert result["error"] is None, (name, result["error"])
        assert result["finish_class"] in ("FinishStop", "FinishLength", "FinishAbort"), (name, result)
        ours, canonical = client.parse_generate(raw, -1), client.parse_generate(result["canonical"], -1)
        assert ours == canonical, name
        finishes.add(ours.finish_reason)
    assert {"stop", "length"} <= finishes


def test_cpu_server_info_passes_sglangs_contract(probe):
    """Our CPU server's /get_server_info decodes with SGLang's GetServerInfoResponse contract
    and keeps internal_states as a list with one entry per DP rank (we have one)."""
    assert probe["server_info"]["error"] is None, probe["server_info"]["error"]
    assert len(probe["server_info"]["canonical"]["internal_states"]) == 1


def test_kv_usage_keys_we_read_are_written_by_sglang():
    """Every key process.server_kv_usage reads is one SGLang's GET /v1/loads writes: the route's
    own keys or a LoadSnapshot field (its per-DP-rank core). (SGLang 0.5.23's /server_info carries
    no KV use at all, so reading it there would leave the engine KV peak at 0 on GPUs.)"""
    read = keys_read(process.server_kv_usage)
    written = sglang_side.string_literals(LOADS_WRITER) | set(sglang_side.class_fields(LOAD_SNAPSHOT, "LoadSnapshot"))
    assert {"loads", "token_usage"} <= read <= written, read - written


def test_cpu_server_loads_have_sglangs_shape(served):
    """Our CPU server's /v1/loads has the route's top-level keys and, per DP rank, only
    LoadSnapshot fields, with the KV use server_kv_usage reads."""
    fields = set(sglang_side.class_fields(LOAD_SNAPSHOT, "LoadSnapshot"))
    answer = served["loads"]
    assert {"timestamp", "version", "accelerator", "num_accelerators", "loads"} == set(answer)
    assert len(answer["loads"]) == 1 and set(answer["loads"][0]) <= fields, set(answer["loads"][0]) - fields
    assert process.server_kv_usage(answer) == answer["loads"][0]["token_usage"]


def test_side_install_is_the_pinned_sglang():
    """The side install these checks read is the SGLang version the Makefile pins, which is
    the one sglang_side names (one version throughout)."""
    with open(os.path.join(REPO, "Makefile")) as f:
        pins = [line.split(":=")[1].strip() for line in f if line.startswith("SGLANG_VERSION :=")]
    assert pins == [sglang_side.SGLANG_VERSION]
    installed = [n for n in os.listdir(sglang_side.side_dir()) if n.startswith("sglang-") and n.endswith(".dist-info")]
    assert installed == [f"sglang-{sglang_side.SGLANG_VERSION}.dist-info"]
