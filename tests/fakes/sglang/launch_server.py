"""`python -m sglang.launch_server ARGS` without a GPU: writes what it was started with to
$SWERVE_FAKE_SGLANG_RECORD/<port>.json, then runs our CPU server (SGLang's native HTTP API) on
the same host, port, model and context length. SGLang's own flags that have no CPU meaning
(tensor parallelism, memory fraction) are accepted and recorded only."""
import argparse
import json
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--model-path", required=True)
parser.add_argument("--host", required=True)
parser.add_argument("--port", required=True)
parser.add_argument("--context-length", required=True)
parser.add_argument("--weight-version", default="0")
parser.add_argument("--tp-size", type=int, required=True)
parser.add_argument("--mem-fraction-static", type=float, required=True)
args, extra = parser.parse_known_args()
record = {"argv": sys.argv[1:], "tp_size": args.tp_size, "pid": os.getpid(),
          "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "unknown_args": extra}
with open(os.path.join(os.environ["SWERVE_FAKE_SGLANG_RECORD"], f"{args.port}.json"), "w") as f:
    json.dump(record, f)
os.execv(sys.executable, [sys.executable, "-m", "policies.server", "--model-path", args.model_path,
                          "--host", args.host, "--port", args.port, "--context-length", args.context_length,
                          "--weight-version", args.weight_version, "--torch-threads", "1"])
