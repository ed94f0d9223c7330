"""EngineActor in-process, against the real CPU server it starts (and a fake SGLang server)."""
import importlib.util
import os
import sys
import threading
import time

import openai
import pytest
import torch

from actors.engines import engine_actor
from actors.engines.engine_actor import EngineActor
from policies.engines.client import EngineClient, EngineUnreachable, generate_body, parse_generate
from policies.engines.process import weights_file_bytes
from configs.schema import EngineConfig
from policies.model import load_model
from policies.sample_types import SampleRequest

pytestmark = pytest.mark.slow  # every test starts an engine server process

CAP = 256


def run_concurrently(engine, requests):
    results = [None] * len(requests)

    def go(i):
        results[i] = engine.generate(requests[i])

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def wait_running(engine, n=1, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while engine.client.get_server_info()["num_running_reqs"] < n:
        assert time.monotonic() < deadline, "request never started running"
        time.sleep(0.02)


def perturbed(model_path, scale=0.05, seed=0):
    torch.manual_seed(seed)
    return weights_file_bytes({k: v + scale * torch.randn_like(v) for k, v in load_model(model_path).state_dict().items()})


@pytest.fixture(scope="module")
def engine(model_path):
    engine = EngineActor(0, EngineConfig(max_context_tokens=CAP, max_batch_size=8), model_path)
    yield engine
    engine.close()


def test_concurrent_requests_share_the_server(engine):
    outs = run_concurrently(engine, [SampleRequest([1, 5, 9, 12], 8, seed=i) for i in range(6)])
    assert all(len(o.token_ids) == 8 and o.finish_reason == "length" for o in outs)
    assert all(v == engine.version() for o in outs for v in o.versions)
    assert all(lp <= 0 for o in outs for lp in o.logprobs)
    stats = engine.stats()
    assert stats["served"] >= 6 and stats["tokens_per_s"] > 0 and stats["running"] == 0
    assert engine.token_versions  # our server tags every token with its weight version


def test_weight_update_changes_version_and_outputs(engine, model_path):
    request = SampleRequest([1, 5, 9, 12], 6, temperature=0.0)
    before = engine.generate(request)
    v = engine.version() + 1
    assert engine.update_weights(perturbed(model_path), v) == v
    after = engine.generate(request)
    assert after.versions == [v] * 6 and before.versions == [v - 1] * 6
    assert after.logprobs != before.logprobs
    assert 0 < engine.last_update["total_s"] < 10 and engine.stats()["weight_update_s"] > 0
    print(f"\nweight update (write safetensors + pause/update_weights_from_disk/continue): "
          f"{engine.last_update['total_s'] * 1000:.1f} ms (write {engine.last_update['write_s'] * 1000:.1f} ms)")


def test_update_during_a_long_request_keeps_it_and_tags_new_tokens(engine, model_path, monkeypatch):
    state = perturbed(model_path, seed=1)
    v0 = engine.version()
    # The weights are on disk before the request starts, so the update that lands mid-request is
    # pause -> load -> continue only: writing them under a loaded machine took longer than the
    # rest of the request, which then finished on the old weights alone.
    written = engine_actor.write_weights(engine.workdir, model_path, state, v0 + 1)
    monkeypatch.setattr(engine_actor, "write_weights", lambda *args: written)
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("out", engine.generate(
        SampleRequest([1, 5, 9, 12], CAP - 4, seed=3))))
    worker.start()
    wait_running(engine)
    time.sleep(0.05)
    engine.update_weights(state, v0 + 1)
    worker.join()
    out = result["out"]
    # Not lost, not restarted: it runs to its length, or ends on EOS once the new weights (a random
    # perturbation) make that likely; which one depends on when the update lands.
    assert (out.finish_reason, len(out.token_ids) == CAP - 4) in {("length", True), ("stop", False)}
    assert out.versions[0] == v0 and out.versions[-1] == v0 + 1
    assert out.versions == sorted(out.versions) and set(out.versions) == {v0, v0 + 1}


def test_context_cap_per_request(engine):
    out = engine.generate(SampleRequest(list(range(1, CAP - 5)), 50))
    assert len(out.token_ids) == 6 and out.finish_reason == "length"
    full = engine.generate(SampleRequest(list(range(1, CAP + 10)), 5))
    assert full.token_ids == [] and full.finish_reason == "length"


def test_one_runaway_request_cannot_starve_the_others(engine):
    result, finished = {}, {}

    def runaway():
        result["out"] = engine.generate(SampleRequest([1, 2, 3], 1_000_000, seed=9))
        finished["runaway"] = time.monotonic()

    worker = threading.Thread(target=runaway)
    worker.start()
    wait_running(engine)
    outs = run_concurrently(engine, [SampleRequest([4, 5, 6], 8, seed=i) for i in range(4)])
    short_done = time.monotonic()
    worker.join()
    assert all(len(o.token_ids) == 8 for o in outs)
    assert short_done < finished["runaway"]  # the short ones did not wait for the runaway
    assert len(result["out"].token_ids) == CAP - 3 and result["out"].finish_reason == "length"


def test_kv_use_is_reported_with_a_peak(engine):
    """The server's KV use is sampled every STATS_INTERVAL_S, so a burst shorter than a sample can pass
    unseen on a loaded machine (once, with the suite on two workers): bursts repeat until one is seen."""
    engine.stats(reset_peak=True)
    for _ in range(5):
        run_concurrently(engine, [SampleRequest([1, 2, 3], 120, seed=i) for i in range(4)])
        time.sleep(engine_actor.STATS_INTERVAL_S * 2)
        stats = engine.stats()
        if stats["kv_usage_peak"] > 0:
            break
    assert 0 < stats["kv_usage_peak"] <= 1 and stats["kv_usage"] <= stats["kv_usage_peak"]
    assert engine.stats(reset_peak=True)["kv_usage_peak"] >= stats["kv_usage_peak"]  # a reset reports, then restarts, the peak


def test_abort_returns_the_partial_output(engine):
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("out", engine.generate(
        SampleRequest([1, 2, 3], CAP - 3, seed=5))))
    worker.start()
    wait_running(engine)
    time.sleep(0.1)
    [rid] = engine.inflight()
    engine.abort(rid)
    worker.join()
    assert result["out"].finish_reason == "abort" and 0 < len(result["out"].token_ids) < CAP - 3


def test_close_ends_the_server(model_path):
    engine = EngineActor(1, EngineConfig(), model_path)
    client, proc, workdir = engine.client, engine.server.proc, engine.workdir
    assert client.health()
    engine.close()
    assert proc.poll() is not None and not os.path.exists(workdir)
    with pytest.raises(EngineUnreachable):
        client.get("/health", timeout_s=2)


def test_a_server_that_cannot_start_is_a_clear_error(model_path):
    with pytest.raises(RuntimeError, match="server exited") as err:
        EngineActor(2, EngineConfig(server_args=["--no-such-flag"]), model_path)
    assert "no-such-flag" in str(err.value)  # the server's own log tail is in the message


def test_sglang_path_aborts_and_resumes_with_exact_versions(monkeypatch, tmp_path):
    """A server without per-token versions (SGLang) is paused with mode 'abort'; the request
    resumes from its partial output, so every token carries the version that produced it."""
    fake = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "policies", "engines", "test_client.py")
    monkeypatch.setattr(engine_actor, "server_command",
                        lambda cfg, model_path, port: [sys.executable, fake, "--port", str(port)])
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # the one GPU the placement would have given it
    engine = EngineActor(3, EngineConfig(backend="sglang", startup_timeout_s=30), str(tmp_path))
    try:
        assert not engine.token_versions
        result = {}
        worker = threading.Thread(target=lambda: result.setdefault("out", engine.generate(
            SampleRequest([1, 2, 3], 150))))
        worker.start()
        deadline = time.monotonic() + 10
        while not engine.inflight() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        assert engine.update_weights(weights_file_bytes({"w": torch.zeros(2)}), 1) == 1
        worker.join()
        out = result["out"]
        assert len(out.token_ids) == 150 and out.finish_reason == "length"
        assert [t // 100 for t in out.token_ids] == out.versions  # the fake names its weights in each token
        assert out.versions[0] == 0 and out.versions[-1] == 1
        sent = [body for path, body in EngineClient(engine.client.base_url).get("/_log") if path == "/pause_generation"]
        assert sent == [{"mode": "abort"}]
    finally:
        engine.close()


def _has_sglang_gpu() -> bool:
    return torch.cuda.is_available() and importlib.util.find_spec("sglang") is not None


@pytest.mark.skipif(not _has_sglang_gpu(), reason="gpu: SGLang needs a CUDA GPU")
def test_sglang_backend_serves_and_updates_weights(model_path):
    engine = EngineActor(0, EngineConfig(backend="sglang", max_context_tokens=1024, mem_fraction=0.5), model_path)
    try:
        out = engine.generate(SampleRequest([1, 5, 9, 12], 8, seed=1))
        assert len(out.token_ids) == 8 and out.versions == [0] * 8
        assert engine.update_weights(perturbed(model_path), 1) == 1
        assert engine.generate(SampleRequest([1, 5, 9, 12], 4)).versions == [1] * 4
    finally:
        engine.close()


@pytest.mark.skipif(not _has_sglang_gpu(), reason="gpu: NCCL weight sync needs SGLang on a CUDA GPU")
def test_sglang_weight_sync_by_nccl_broadcast(model_path):
    import torch.distributed as dist

    from policies.engines.process import free_port

    engine = EngineActor(0, EngineConfig(backend="sglang", max_context_tokens=1024, mem_fraction=0.5), model_path)
    try:
        port = free_port()
        joined = threading.Thread(target=engine.init_weights_update_group, args=("127.0.0.1", port, 1, 2))
        joined.start()
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=2)
        joined.join()
        state = {k: v.cuda() for k, v in perturbed(model_path).items()}
        names, dtypes, shapes = list(state), [str(v.dtype).split(".")[-1] for v in state.values()], \
            [list(v.shape) for v in state.values()]
        update = threading.Thread(target=engine.update_weights_from_distributed, args=(names, dtypes, shapes, 1))
        update.start()
        for tensor in state.values():
            dist.broadcast(tensor, src=0)
        update.join()
        assert engine.version() == 1
    finally:
        engine.close()


def test_swerve_serve_runs_a_standalone_cpu_engine(swerve_cache, model_path):
    import subprocess

    from policies.engines.process import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "actors", "serve", "--port", str(port),
                             f"model.cache_dir={swerve_cache}", f"tokenizer.cache_dir={swerve_cache}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    client = EngineClient(f"http://127.0.0.1:{port}", timeout_s=30)
    try:
        deadline = time.monotonic() + 120
        while not client.health(timeout_s=1):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read().decode()[-2000:]
            time.sleep(0.2)
        out = parse_generate(client.generate_raw(generate_body(SampleRequest([1, 5, 9, 12], 5, seed=1), "serve-1")), 0)
        assert len(out.token_ids) == 5 and out.versions == [0] * 5
        assert client.get_server_info()["model_path"] == model_path
        # The README's recipe: the openai client on the same server's OpenAI-compatible routes.
        chat = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=60)
        assert [m.id for m in chat.models.list()] == [model_path]
        reply = chat.chat.completions.create(model=model_path, max_tokens=4, temperature=0.0,
                                             messages=[{"role": "user", "content": "Fix the bug."}])
        assert reply.choices[0].message.role == "assistant" and 1 <= reply.usage.completion_tokens <= 4
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_port_taken_before_the_server_binds_it_is_traded_for_a_fresh_one(model_path, monkeypatch):
    """free_port's port is only free when asked: another process may bind it before the server
    does. The server then exits naming the port, and the engine starts it again elsewhere."""
    import socket

    from policies.engines.process import ENGINE_HOST

    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.bind((ENGINE_HOST, 0))  # another process's socket, bound between the pick and the start
    taken = held.getsockname()[1]
    picks = iter([taken])
    real_free_port = engine_actor.free_port
    monkeypatch.setattr(engine_actor, "free_port", lambda: next(picks, None) or real_free_port())
    engine = EngineActor(0, EngineConfig(max_context_tokens=CAP, max_batch_size=8), model_path)
    try:
        assert engine.port != taken
        assert len(engine.generate(SampleRequest([1, 5, 9], 3)).token_ids) == 3
        with open(os.path.join(engine.workdir, "server.log")) as first_try:
            assert "already in use" in first_try.read()
    finally:
        engine.close()
        held.close()
