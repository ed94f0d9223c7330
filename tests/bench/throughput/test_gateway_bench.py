"""gateway bench: its conversations take the session's extension path, and a tiny run reports its figures
(structure and bookkeeping, never timing)."""
import pytest

from actors.episodes.gateway import GatewaySpec
from bench.throughput import gateway as bench_gateway
from policies.chat.chat_tokenizer import load_chat_tokenizer


def test_each_request_extends_the_conversation_the_gateway_answered(tiny_cfg, tokenizer_path):
    tokenizer = load_chat_tokenizer(tokenizer_path)
    episode = bench_gateway.Episode(tiny_cfg, tokenizer, GatewaySpec.from_config(tiny_cfg).max_model_len)
    turns = bench_gateway.TURNS
    times = bench_gateway.direct_times(episode, calls=2 * turns, turns=turns)
    assert len(times) == 2 * turns and min(times) > 0  # the warm-up conversation is not timed
    assert episode.answered == 3 * turns
    # The last conversation is one segment: no request was a rewritten history that started over.
    chat = episode.chat
    assert chat.requests == turns and len(chat.segments) == 1
    reply_ids = bench_gateway.ZeroWorkEngine(tokenizer).generate(None, "k").token_ids
    assert sum(chat.current.loss_mask) == turns * len(reply_ids)  # each sampled reply kept, never re-encoded
    transcript = chat.transcript()
    assert [m["role"] for m in transcript[:4]] == ["system", "user", "assistant", "tool"]
    assert transcript[2]["tool_calls"][0]["function"]["name"] == "bash"


@pytest.mark.slow  # starts a gateway process and a load process
def test_a_tiny_run_reports_latency_and_throughput_on_two_pinned_processes(tiny_cfg, monkeypatch):
    calls, sessions = 12, 3
    monkeypatch.setattr(bench_gateway, "SESSIONS", sessions)
    monkeypatch.setattr(bench_gateway, "LATENCY_CALLS", calls)
    monkeypatch.setattr(bench_gateway, "THROUGHPUT_S", 0.5)
    monkeypatch.setattr(bench_gateway, "WARMUP_S", 0.2)
    result = bench_gateway.gateway(tiny_cfg, repetitions=1)
    run = result["runs"][0]
    assert result["added_p50_s"] == run["gateway_p50_s"] - run["direct_p50_s"]
    assert result["baseline"] == result["direct_p50_s"]
    assert result["ratio"] == result["gateway_p50_s"] / result["direct_p50_s"]
    assert result["met"] == (result["requests_per_s_one_core"] >= bench_gateway.TARGET_PER_S)
    extending, first = run["throughput"]["extending"], run["throughput"]["first_request"]
    assert extending["conversations"] == first["conversations"] == sessions
    assert (extending["turns_per_conversation"], first["turns_per_conversation"]) == (bench_gateway.TURNS, 1)
    assert extending["requests"] > 0 and first["requests"] > 0
    # Every call the client timed or counted reached an episode through the gateway (warm-ups on top).
    assert run["served_requests"] >= calls + bench_gateway.TURNS + extending["requests"] + first["requests"]
    assert 0 < run["answer_cpu_per_request_s"] and 0 < run["gateway_cpu_per_request_s"]
    assert 0 < run["server_core_share"] <= 1.05 and result["setup"]["sessions"] == sessions
