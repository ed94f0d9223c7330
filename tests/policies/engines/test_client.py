"""EngineClient and the engine's update protocol against SGLang-shaped JSON.

Run as a script (`python tests/policies/engines/test_client.py --port N`), this file is a fake
SGLang server: token-in/token-out /generate without per-token versions, pause (abort mode
returns partial outputs), update_weights_from_disk, continue. It lets the SGLang code path of
EngineActor (abort, then resume from the partial output) run without a GPU.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_DELAY_S = 0.01


class FakeSGLang:
    def __init__(self):
        self.version = "default"
        self.paused = False
        self.cond = threading.Condition()
        self.aborted: set[str] = set()
        self.running: set[str] = set()
        self.log: list = []

    def generate(self, body: dict) -> dict:
        rid, params = body["rid"], body["sampling_params"]
        prompt = body["input_ids"]
        out, finish = [], {"type": "length", "length": params["max_new_tokens"]}
        with self.cond:
            self.running.add(rid)
        try:
            while len(out) < params["max_new_tokens"]:
                with self.cond:
                    while self.paused and rid not in self.aborted:
                        self.cond.wait()
                    if rid in self.aborted:
                        finish = {"type": "abort", "message": "Abort in waiting queue"}
                        break
                    # The token names the weights that produced it: version * 100 + position.
                    version = 0 if self.version == "default" else int(self.version)
                    out.append(version * 100 + (len(prompt) + len(out)) % 100)
                time.sleep(TOKEN_DELAY_S)
        finally:
            with self.cond:
                self.running.discard(rid)
                self.aborted.discard(rid)
        return {"text": "", "output_ids": out,
                "meta_info": {"id": rid, "finish_reason": finish, "prompt_tokens": len(prompt),
                              "completion_tokens": len(out), "weight_version": self.version,
                              "output_token_logprobs": [[-0.5, t, None] for t in out]}}

    def handle(self, path: str, body: dict):
        self.log.append((path, body))
        if path == "/generate":
            return 200, self.generate(body)
        with self.cond:
            if path == "/pause_generation":
                self.paused = True
                if body.get("mode", "abort") == "abort":
                    self.aborted |= self.running
                self.cond.notify_all()
                return 200, {"message": "Generation paused successfully.", "status": "ok"}
            if path == "/continue_generation":
                self.paused = False
                self.cond.notify_all()
                return 200, {"message": "Generation continued successfully.", "status": "ok"}
            if path == "/update_weights_from_disk":
                self.version = body.get("weight_version", self.version)
                return 200, {"success": True, "message": "ok", "num_paused_requests": 0}
            if path == "/abort_request":
                self.aborted |= self.running if body.get("abort_all") else {body.get("rid", "")}
                self.cond.notify_all()
                return 200, None
            if path == "/flush_cache":
                return (400 if self.running else 200), None
            if path in ("/health", "/health_generate"):
                return 200, None
            if path == "/_log":
                return 200, self.log
        return 404, {"error": {"message": f"no route {path}"}}


def serve(port: int) -> None:
    fake = FakeSGLang()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: dict):
            status, answer = fake.handle(self.path, body)
            data = b"" if answer is None else json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            length = int(self.headers.get("Content-Length", 0))
            self._answer(json.loads(self.rfile.read(length) or b"{}"))

        def do_GET(self):
            self._answer({})

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    serve(int(sys.argv[sys.argv.index("--port") + 1]))
    sys.exit(0)

# ---------------------------------------------------------------------------- tests
import pytest  # noqa: E402

from policies.engines.client import (EngineClient, EngineHTTPError, EngineUnreachable, generate_body,  # noqa: E402
                                  parse_generate)
from policies.sample_types import SampleRequest  # noqa: E402

SGLANG_RESPONSE = {
    "text": " world",
    "output_ids": [11, 12, 2],
    "meta_info": {
        "id": "r1", "finish_reason": {"type": "stop", "matched": 2}, "prompt_tokens": 4,
        "completion_tokens": 3, "cached_tokens": 0, "weight_version": "3", "e2e_latency": 0.1,
        "output_token_logprobs": [[-0.25, 11, None], [-1.5, 12, None], [-0.01, 2, None]],
    },
}


def test_parses_sglang_response_without_token_versions():
    out = parse_generate(SGLANG_RESPONSE, fallback_version=0)
    assert out.token_ids == [11, 12, 2] and out.logprobs == [-0.25, -1.5, -0.01]
    assert out.versions == [3, 3, 3] and out.finish_reason == "stop"


def test_per_token_versions_win_and_default_version_falls_back():
    item = json.loads(json.dumps(SGLANG_RESPONSE))
    item["meta_info"]["output_token_weight_versions"] = [2, 2, 3]
    assert parse_generate(item, 0).versions == [2, 2, 3]
    item = json.loads(json.dumps(SGLANG_RESPONSE))
    item["meta_info"]["weight_version"] = "default"
    item["meta_info"]["finish_reason"] = {"type": "length", "length": 3}
    out = parse_generate(item, fallback_version=5)
    assert out.versions == [5, 5, 5] and out.finish_reason == "length"


def test_sglangs_weight_version_spans_tag_each_token_and_win_over_the_old_list():
    item = json.loads(json.dumps(SGLANG_RESPONSE))
    # SGLang 0.5.23: a request that ran across an update (pause in_place / retract).
    item["meta_info"]["weight_versions"] = [{"version": "2", "start": 0, "end": 1},
                                            {"version": "3", "start": 1, "end": 3}]
    item["meta_info"]["output_token_weight_versions"] = [9, 9, 9]  # ignored when spans are there
    assert parse_generate(item, 0).versions == [2, 3, 3]
    del item["output_ids"]  # counted from the logprobs then, as the ids are
    assert parse_generate(item, 0).versions == [2, 3, 3]


@pytest.mark.parametrize("spans", [
    [{"version": "2", "start": 0, "end": 2}],  # covers 2 of 3 tokens
    [{"version": "2", "start": 0, "end": 1}, {"version": "3", "start": 2, "end": 3}],  # a gap
    [{"version": "3", "start": 1, "end": 3}, {"version": "2", "start": 0, "end": 1}],  # out of order
])
def test_spans_that_do_not_tile_the_output_are_an_error(spans):
    item = json.loads(json.dumps(SGLANG_RESPONSE))
    item["meta_info"]["weight_versions"] = spans
    with pytest.raises(ValueError, match="weight_versions spans"):
        parse_generate(item, 0)


def test_version_spans_round_trip():
    from policies.engines.protocol import spans_to_tokens, version_spans

    for versions in ([], [4], [1, 1, 2, 2, 2, 1], [0, 1, 2]):
        assert spans_to_tokens(version_spans(versions), len(versions)) == versions
    assert version_spans([1, 1, 2]) == [{"version": "1", "start": 0, "end": 2}, {"version": "2", "start": 2, "end": 3}]


def test_abort_and_token_ids_from_logprobs_when_output_ids_absent():
    item = json.loads(json.dumps(SGLANG_RESPONSE))
    del item["output_ids"]
    item["meta_info"]["finish_reason"] = {"type": "abort", "message": "Abort in waiting queue"}
    out = parse_generate(item, 0)
    assert out.token_ids == [11, 12, 2] and out.finish_reason == "abort"


def test_missing_logprobs_is_an_error_not_a_silent_zero():
    item = json.loads(json.dumps(SGLANG_RESPONSE))
    item["meta_info"]["output_token_logprobs"] = []
    with pytest.raises(ValueError, match="return_logprob"):
        parse_generate(item, 0)


def test_generate_body_is_sglang_native():
    body = generate_body(SampleRequest([1, 2, 3], 8, 0.7, 0.9, (2,), seed=4), "rid-1")
    assert body["input_ids"] == [1, 2, 3] and body["rid"] == "rid-1" and body["return_logprob"] is True
    params = body["sampling_params"]
    assert params["max_new_tokens"] == 8 and params["temperature"] == 0.7 and params["top_p"] == 0.9
    assert params["stop_token_ids"] == [2] and params["sampling_seed"] == 4 and params["no_stop_trim"] is True
    assert "priority" not in body  # fifo: a server without priority scheduling gets none
    assert "stop" not in params  # no stop strings: the body is what it was before they were sent


def test_stop_strings_are_sent_as_sglangs_sampling_params_stop():
    body = generate_body(SampleRequest([1, 2, 3], 8, stop=("</cmd>", "\nEND")), "rid-1")
    assert body["sampling_params"]["stop"] == ["</cmd>", "\nEND"]
    assert body["sampling_params"]["no_stop_trim"] is True  # output_ids keep the stop's tokens either way


def test_age_priority_is_sent_only_when_the_engine_schedules_by_it():
    from policies.sample_types import age_priority

    request = SampleRequest([1, 2], 4, priority=age_priority(2, 1_800_000_000.0))
    assert generate_body(request, "r", with_priority=True)["priority"] == request.priority
    assert "priority" not in generate_body(request, "r")
    # Older first: an older policy version outranks any start time; then the earlier start.
    assert age_priority(1, 2e9) > age_priority(2, 1e9) and age_priority(2, 1e9) > age_priority(2, 1e9 + 1)


@pytest.fixture(scope="module")
def fake_server():
    import subprocess

    from policies.engines.process import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--port", str(port)])
    client = EngineClient(f"http://127.0.0.1:{port}", timeout_s=30)
    deadline = time.monotonic() + 20
    while not client.health(timeout_s=1) and time.monotonic() < deadline:
        time.sleep(0.1)
    yield client
    proc.kill()
    proc.wait()


def test_client_sends_sglang_paths_and_bodies(fake_server):
    client = fake_server
    client.pause_generation("retract")
    client.update_weights_from_disk("/tmp/w", weight_version="7")
    client.continue_generation()
    client.abort("r9")
    log = client.get("/_log")
    sent = {path: body for path, body in log}
    assert sent["/pause_generation"] == {"mode": "retract"}
    assert sent["/update_weights_from_disk"]["model_path"] == "/tmp/w"
    assert sent["/update_weights_from_disk"]["weight_version"] == "7"
    assert sent["/abort_request"]["rid"] == "r9"
    out = parse_generate(client.generate_raw(generate_body(SampleRequest([1, 2], 3), "g1")), 0)
    assert out.versions == [7, 7, 7] and len(out.token_ids) == 3 and out.finish_reason == "length"


def test_http_errors_and_unreachable_servers_are_told_apart(fake_server):
    with pytest.raises(EngineHTTPError) as err:
        fake_server.post("/no_such_route", {})
    assert err.value.status == 404
    from policies.engines.process import free_port

    with pytest.raises(EngineUnreachable):
        EngineClient(f"http://127.0.0.1:{free_port()}", timeout_s=2).get("/health")
