"""Run by tests/policies/engines/test_sglang_conformance.py in a subprocess (importing SGLang installs a
triton placeholder and reconfigures logging, which must not leak into pytest): reads the payload of
our launch argv, request bodies and responses on stdin, checks each with SGLang's own code and prints
the findings as one `PROBE-JSON` line."""
import argparse, contextlib, io, json, sys, traceback
from policies.engines import sglang_side

def plain(value):
    return sorted(value) if isinstance(value, (set, frozenset)) else list(value) if isinstance(value, tuple) else value

def failure(err):
    frames = [f.filename for f in traceback.extract_tb(err.__traceback__) if "sglang" in f.filename]
    return f"{type(err).__name__}: {err}" + (f" (in {frames[-1]})" if frames else "")

payload, out = json.load(sys.stdin), {}
sa = sglang_side.server_args_module()
parser = argparse.ArgumentParser()
sa.ServerArgs.add_cli_args(parser)
flags = parser._option_string_actions
out["server_args_fields"] = sorted(sa.ServerArgs.__struct_fields__)
out["launch"] = {}
for name, argv in payload["launch"].items():
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = sa.prepare_server_args(argv)  # what `python -m sglang.launch_server` runs
    except SystemExit:
        out["launch"][name] = {"error": stderr.getvalue().strip().splitlines()[-1]}
        continue
    checks = []
    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            continue
        action = flags.get(arg)  # exact flags only: argparse would also take an abbreviation
        if action is None:
            checks.append({"flag": arg, "dest": None})
            continue
        value = argv[i + 1] if action.nargs is None else None
        expected = action.const if action.nargs == 0 else (action.type or str)(value)
        checks.append({"flag": arg, "dest": action.dest, "expected": plain(expected),
                       "got": plain(getattr(args, action.dest))})
    out["launch"][name] = {"error": None, "checks": checks,
                           "values": {f: plain(getattr(args, f)) for f in payload["fields"] if hasattr(args, f)}}

api = sglang_side.api_types_module()
def contract(cls, value):
    try:
        decoded = cls.from_json_value(value)
    except api.JsonContractError as err:
        return {"error": str(err)}
    return {"error": None, "canonical": decoded.to_json_value(), "decoded": decoded}
out["generate_contract"] = {n: contract(api.GenerateRequest, b)["error"] for n, b in payload["generate"].items()}
out["abort_contract"] = [contract(api.AbortRequest, b)["error"] for b in payload["abort"]]
out["responses"] = {}
for n, item in payload["responses"].items():
    res = contract(api.GenerateResponse, item)
    if res["error"] is None:
        res["finish_class"] = type(res.pop("decoded").meta_info.finish_reason).__name__
    out["responses"][n] = res
info = contract(api.GetServerInfoResponse, payload["server_info"])
info.pop("decoded", None)
out["server_info"] = info

from sglang.srt.sampling.sampling_params import SamplingParams
from transformers import AutoTokenizer
# The model's tokenizer, as the TokenizerManager of a server started without --skip-tokenizer-init
# (swerve's launch) holds: stop strings are refused without one.
tokenizer = AutoTokenizer.from_pretrained(payload["model_path"])
# normalize() moves the API alias `stop` into stop_strs (and clears it): read the value there.
NORMALIZED = {"stop": "stop_strs"}
out["sampling"] = {}
for n, body in payload["generate"].items():
    params = body["sampling_params"]
    try:  # as TokenizerManager._create_tokenized_object does
        sp = SamplingParams(**params)
        sp.normalize(tokenizer)
        sp.verify(payload["vocab_size"])
    except Exception as err:
        out["sampling"][n] = {"error": failure(err)}
        continue
    out["sampling"][n] = {"error": None, "values": {k: plain(getattr(sp, NORMALIZED.get(k, k))) for k in params},
                          "top_k": sp.top_k, "temperature": sp.temperature}

try:
    from sglang.srt.managers.io_struct import GenerateReqInput
except Exception as err:
    out["generate_req_input"] = {"import_error": failure(err)}
else:
    out["generate_req_input"] = {}
    for n, body in payload["generate"].items():
        try:
            GenerateReqInput(**body).normalize_batch_and_arguments()
            out["generate_req_input"][n] = None
        except Exception as err:
            out["generate_req_input"][n] = failure(err)
print("PROBE-JSON " + json.dumps(out))
