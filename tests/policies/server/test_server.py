"""The CPU inference server over real HTTP on 127.0.0.1 (server in a background thread)."""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from policies.training.logprobs import sequence_logprobs
from policies.model import load_model
from policies.engines import protocol
from policies.server.app import start_server
from bench.throughput.engine_throughput import measure_throughput

MAX_CONTEXT = 256


def post(url, path, body=None, timeout=120):
    data = json.dumps(body if body is not None else {}).encode()
    req = urllib.request.Request(url + path, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        raw, status = error.read(), error.code
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode()


def get(url, path, timeout=60):
    try:
        with urllib.request.urlopen(url + path, timeout=timeout) as response:
            raw, status = response.read(), response.status
    except urllib.error.HTTPError as error:
        raw, status = error.read(), error.code
    return status, (json.loads(raw) if raw else None)


def gen_body(prompt, max_new_tokens=8, temperature=0.0, rid=None, **params):
    body = protocol.generate_request(prompt, max_new_tokens=max_new_tokens,
                                     temperature=temperature, rid=rid, return_logprob=True)
    body["sampling_params"].update({"ignore_eos": True, **params})
    return body


def info(url):
    return get(url, protocol.GET_SERVER_INFO)[1]


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached in time")


def in_background(fn, *args):
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("value", fn(*args)), daemon=True)
    thread.start()
    return thread, out


def prompts(n):
    return [[(7 * i + 3 * j) % 400 + 5 for j in range(3 + 5 * i)] for i in range(n)]


@pytest.fixture(scope="module")
def server(model_path):
    with start_server(model_path, max_batch_size=8, max_context_tokens=MAX_CONTEXT) as handle:
        yield handle.url


def test_generate_returns_token_ids_and_one_logprob_per_token(server, model):
    prompt = prompts(3)[2]
    status, out = post(server, protocol.GENERATE, gen_body(prompt, max_new_tokens=6))
    assert status == 200
    meta = out["meta_info"]
    assert len(out["output_ids"]) == 6 and meta["completion_tokens"] == 6
    assert meta["prompt_tokens"] == len(prompt)
    assert meta["finish_reason"] == {"type": "length", "length": 6}
    assert [entry[1] for entry in meta["output_token_logprobs"]] == out["output_ids"]
    assert all(entry[2] is None for entry in meta["output_token_logprobs"])
    assert meta["output_token_weight_versions"] == [0] * 6
    assert meta["weight_versions"] == [{"version": "0", "start": 0, "end": 6}]  # SGLang's spans
    assert meta["weight_version"] == "0"
    assert isinstance(out["text"], str)
    # The behaviour log-probs are what the trainer recomputes (greedy reports T=1).
    ids = torch.tensor([prompt + out["output_ids"]])
    trainer = sequence_logprobs(model, ids, torch.ones_like(ids))[0, len(prompt):]
    served = torch.tensor([entry[0] for entry in meta["output_token_logprobs"]])
    assert torch.allclose(trainer, served, atol=1e-4)
    parsed = protocol.parse_generate_response(out)
    assert parsed.output_ids == out["output_ids"] and parsed.token_weight_versions == [0] * 6


def test_batch_input_ids_return_a_list(server):
    status, out = post(server, protocol.GENERATE, {
        "input_ids": prompts(2), "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}})
    assert status == 200 and isinstance(out, list) and len(out) == 2
    assert all(len(item["output_ids"]) == 3 for item in out)


def test_greedy_outputs_identical_with_concurrency_1_and_8(server):
    bodies = [gen_body(p, max_new_tokens=16) for p in prompts(8)]
    sequential = [post(server, protocol.GENERATE, b)[1]["output_ids"] for b in bodies]
    with ThreadPoolExecutor(8) as pool:
        concurrent = [r[1]["output_ids"] for r in pool.map(
            lambda b: post(server, protocol.GENERATE, b), bodies)]
    assert concurrent == sequential


def test_sampling_with_a_seed_is_reproducible(server):
    body = gen_body(prompts(2)[1], max_new_tokens=10, temperature=1.0, top_p=0.9,
                    sampling_seed=123)
    first = post(server, protocol.GENERATE, body)[1]
    second = post(server, protocol.GENERATE, body)[1]
    assert first["output_ids"] == second["output_ids"]


def test_prompt_over_the_context_cap_is_refused_naming_the_limit(server):
    status, out = post(server, protocol.GENERATE, gen_body([5] * MAX_CONTEXT))
    assert status == 400
    assert "max_context_tokens=256" in out["error"]["message"]


def test_generation_stops_at_the_context_cap_with_length(server):
    prompt = [9] * (MAX_CONTEXT - 5)
    status, out = post(server, protocol.GENERATE, gen_body(prompt, max_new_tokens=100))
    assert status == 200
    assert len(out["output_ids"]) == 5
    assert out["meta_info"]["finish_reason"]["type"] == "length"


def test_stop_token_ends_generation_and_is_kept_in_output_ids(server):
    prompt = prompts(2)[1]
    free = post(server, protocol.GENERATE, gen_body(prompt, max_new_tokens=8))[1]["output_ids"]
    stop = free[3]
    out = post(server, protocol.GENERATE,
               gen_body(prompt, max_new_tokens=8, stop_token_ids=[stop]))[1]
    first = free.index(stop)
    assert out["output_ids"] == free[:first + 1]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}


def test_a_stop_string_ends_generation_as_sglang_s_does(server, tokenizer):
    prompt = prompts(3)[2]
    free = post(server, protocol.GENERATE, gen_body(prompt, max_new_tokens=24, temperature=1.0, sampling_seed=5))[1]
    text = free["text"]
    stop = next(text[i:i + 2] for i in range(len(text) // 3, len(text)) if text[i:i + 2].isalpha())
    body = gen_body(prompt, max_new_tokens=24, temperature=1.0, sampling_seed=5, stop=[stop])
    out = post(server, protocol.GENERATE, body)[1]
    ids = out["output_ids"]
    # Generation ended at the first token whose text holds the stop string; the text is trimmed before it.
    assert ids == free["output_ids"][:len(ids)] and len(ids) < 24
    assert stop in tokenizer.decode(ids) and stop not in tokenizer.decode(ids[:-1])
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert out["text"] == text[:text.find(stop)]
    body["sampling_params"]["no_stop_trim"] = True
    assert post(server, protocol.GENERATE, body)[1]["text"].endswith(stop)
    assert post(server, protocol.GENERATE, gen_body(prompt, stop=[""]))[0] == 400


def test_abort_frees_the_slot(server):
    thread, result = in_background(post, server, protocol.GENERATE,
                                   gen_body([5, 6, 7], max_new_tokens=10**6, rid="long-1"))
    wait_for(lambda: info(server)["num_running_reqs"] == 1)
    status, _ = post(server, protocol.ABORT_REQUEST, protocol.abort_request("long-1"))
    assert status == 200
    assert info(server)["num_running_reqs"] == 0
    thread.join(30)
    status, out = result["value"]
    assert status == 200
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert len(out["output_ids"]) < MAX_CONTEXT


def test_a_client_that_hangs_up_frees_its_slot(model_path):
    with start_server(model_path, max_context_tokens=100_000) as handle:
        url = handle.url
        with pytest.raises(OSError):  # urllib's timeout closes the connection
            post(url, protocol.GENERATE, gen_body([5, 6, 7], max_new_tokens=10**6), timeout=0.3)
        wait_for(lambda: info(url)["num_running_reqs"] == 0, timeout=10)
        generated = info(url)["total_generated_tokens"]
        time.sleep(0.2)
        assert info(url)["total_generated_tokens"] == generated
        assert info(url)["total_finished_requests"] == 1


def test_health_and_server_info_report_queue_and_kv_use(server):
    assert get(server, protocol.HEALTH)[0] == 200
    assert get(server, protocol.HEALTH_GENERATE)[0] == 200
    idle = info(server)
    assert idle["num_running_reqs"] == 0 and idle["num_waiting_reqs"] == 0
    assert idle["token_usage"] == 0.0 and idle["weight_version"] == "0"
    assert idle["internal_states"][0]["running_batch_size"] == 0
    thread, result = in_background(post, server, protocol.GENERATE,
                                   gen_body([5] * 50, max_new_tokens=10**6, rid="busy"))
    wait_for(lambda: info(server)["num_running_reqs"] == 1)
    busy = info(server)
    assert 0 < busy["token_usage"] <= 1 and busy["kv_cache_tokens"] >= 50
    assert busy["gen_throughput"] > 0
    load = get(server, protocol.GET_LOAD)[1]
    assert load[0]["num_reqs"] == 1
    # SGLang refuses to flush the cache while requests run; so do we.
    assert post(server, protocol.FLUSH_CACHE)[0] == 400
    post(server, protocol.ABORT_REQUEST, protocol.abort_request(abort_all=True))
    thread.join(30)
    assert post(server, protocol.FLUSH_CACHE)[0] == 200


def test_runaway_request_does_not_starve_short_ones(server):
    done = {}

    def run(name, body):
        post(server, protocol.GENERATE, body)
        done[name] = time.monotonic()

    runaway = threading.Thread(target=run, args=(
        "runaway", gen_body([5, 6], max_new_tokens=10**6)))
    runaway.start()
    wait_for(lambda: info(server)["num_running_reqs"] == 1)
    shorts = [threading.Thread(target=run, args=(f"short{i}", gen_body(p, max_new_tokens=8)))
              for i, p in enumerate(prompts(4))]
    for thread in shorts:
        thread.start()
    for thread in shorts + [runaway]:
        thread.join(60)
    assert all(done[f"short{i}"] < done["runaway"] for i in range(4))


def test_pause_default_mode_aborts_like_sglang(model_path):
    with start_server(model_path, max_batch_size=4, max_context_tokens=MAX_CONTEXT) as handle:
        url = handle.url
        thread, result = in_background(post, url, protocol.GENERATE,
                                       gen_body([5, 6], max_new_tokens=10**6))
        wait_for(lambda: info(url)["num_running_reqs"] == 1)
        status, out = post(url, protocol.PAUSE_GENERATION, {})
        assert status == 200 and out == {"message": "Generation paused successfully.",
                                         "status": "ok"}
        thread.join(30)
        assert result["value"][1]["meta_info"]["finish_reason"]["type"] == "abort"
        assert post(url, protocol.CONTINUE_GENERATION)[0] == 200


def _perturbed_checkpoint(model_path, out_dir):
    model = load_model(model_path)
    torch.manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.5)
    model.save_pretrained(out_dir)
    return out_dir


@pytest.mark.slow
@pytest.mark.parametrize("mode", [protocol.PAUSE_IN_PLACE, protocol.PAUSE_RETRACT])
def test_weight_update_mid_request_tags_later_tokens_only(model_path, tmp_path, mode):
    new_weights = _perturbed_checkpoint(model_path, str(tmp_path / "v1"))
    with start_server(model_path, max_batch_size=4, max_context_tokens=MAX_CONTEXT) as handle:
        url = handle.url
        n = 200
        threads = [in_background(post, url, protocol.GENERATE,
                                 gen_body(p, max_new_tokens=n)) for p in prompts(2)]
        wait_for(lambda: info(url)["total_generated_tokens"] >= 10)
        assert post(url, protocol.PAUSE_GENERATION,
                    protocol.pause_generation_request(mode))[0] == 200
        status, out = post(url, protocol.UPDATE_WEIGHTS_FROM_DISK,
                           protocol.update_weights_from_disk_request(new_weights, "1"))
        assert status == 200 and out["success"], out
        assert "Weight version updated to 1" in out["message"]
        assert get(url, protocol.GET_WEIGHT_VERSION)[1] == {"weight_version": "1"}
        assert post(url, protocol.CONTINUE_GENERATION)[0] == 200
        for thread, result in threads:
            thread.join(60)
            status, body = result["value"]
            assert status == 200
            versions = body["meta_info"]["output_token_weight_versions"]
            assert len(body["output_ids"]) == n and len(versions) == n  # nothing lost
            switch = versions.index(1)
            assert 0 < switch < n
            assert versions == [0] * switch + [1] * (n - switch)
            assert body["meta_info"]["weight_versions"] == [{"version": "0", "start": 0, "end": switch},
                                                            {"version": "1", "start": switch, "end": n}]
            assert body["meta_info"]["weight_version"] == "1"
        # New requests run on the new weights.
        fresh = post(url, protocol.GENERATE, gen_body([5, 6, 7], max_new_tokens=3))[1]
        assert fresh["meta_info"]["output_token_weight_versions"] == [1, 1, 1]


def test_update_weights_from_a_missing_dir_fails_cleanly(server, tmp_path):
    status, out = post(server, protocol.UPDATE_WEIGHTS_FROM_DISK,
                       protocol.update_weights_from_disk_request(str(tmp_path / "nope"), "9"))
    assert status == 400 and out["success"] is False
    assert get(server, protocol.GET_WEIGHT_VERSION)[1]["weight_version"] == "0"


@pytest.mark.slow
def test_measure_throughput_reports_every_level(model_path):
    report = measure_throughput(model_path, concurrency_levels=(1, 2), requests_per_level=2,
                                max_new_tokens=4, prompt_len=4, max_context_tokens=MAX_CONTEXT)
    assert set(report["levels"]) == {1, 2}
    for level, row in report["levels"].items():
        assert row["concurrency"] == level and row["tokens"] == 8
        assert row["tokens_per_s"] > 0
    assert report["speedup"][1] == pytest.approx(1.0)
    assert report["baseline_tokens_per_s"] == report["levels"][1]["tokens_per_s"]
