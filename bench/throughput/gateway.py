"""`swerve bench gateway`: what the session gateway adds to a harness's model call, and how many
calls one core serves.

The engine does no work (it answers a fixed tool call at once), so what is measured is the
gateway and the episode's side of a request: HTTP, JSON, the session's inbox, the token-exact
render (policies.chat.chat_session) and the reply body. Every request is what mini-swe-agent's
default (tool-calling) configuration sends: the previous messages, the reply it got, then the
tool's output, so the session's extension path runs; after TURNS requests the harness starts
over. The first request of a conversation alone (a full render each time) is measured beside it.

- Direct (the baseline): HarnessPlayer.answer called in-process, per call.
- Through the gateway: the same calls from an httpx client (keep-alive) in another process, one
  at a time; added latency is gateway minus direct, at p50 and p99.
- Throughput: the gateway and its episode threads (SESSIONS sessions) in a process pinned to one
  core, loaded by one aiohttp conversation per session from a process pinned to another core.
  One core's rate is requests per CPU-second of the gateway's process (what the core serves when
  it is the gateway's alone); the wall-clock rate and the share of the core it got are beside it.
"""
from __future__ import annotations

import multiprocessing
import os
import statistics
import threading
import time

from bench.throughput.gateway_harness import REPLY, extend, first_messages, percentile, request_body, run_harness
from configs import Config
from policies.sample_types import FINISH_STOP, SampleOutput

SESSIONS = 64
LATENCY_CALLS = 400  # per repetition, one at a time
THROUGHPUT_S = 10.0  # per mode, per repetition, after WARMUP_S
WARMUP_S = 1.0
TURNS = 8  # requests per conversation before the harness starts over
TARGET_PER_S = 1000.0  # issue 41
STARTUP_TIMEOUT_S = 120.0
SLOW_CALL_S = 0.5  # a child taking this long per call is stuck, not slow
class ZeroWorkEngine:
    """engines.generate at no cost: the same short tool call, closed by <|im_end|>, every time."""

    def __init__(self, tokenizer):
        from policies.chat.chat_tokenizer import IM_END

        ids = tokenizer.encode(REPLY) + [tokenizer.convert_tokens_to_ids(IM_END)]
        self._out = SampleOutput(ids, [-0.5] * len(ids), [0] * len(ids), FINISH_STOP)

    def generate(self, request, sticky_key: str) -> SampleOutput:
        return SampleOutput(list(self._out.token_ids), list(self._out.logprobs), list(self._out.versions),
                            self._out.finish_reason)


class Episode:
    """One episode's side of a session: a ChatSession per conversation, answered by HarnessPlayer."""

    def __init__(self, cfg: Config, tokenizer, max_model_len: int):
        from actors.episodes.gateway import POLICY_MODEL_ID
        from actors.episodes.harness_player import HarnessPlayer, RequestBooks
        from actors.episodes.trajectory import Trajectory, WorkItem

        self.tokenizer = tokenizer
        self.harness = cfg.env.harness
        self.player = HarnessPlayer(tokenizer, cfg.env.harness, cfg.rollout, POLICY_MODEL_ID, max_model_len)
        self.engine = ZeroWorkEngine(tokenizer)
        self.work = WorkItem(None, "bench-gateway", 0, 0, 0, 0, seed=0)
        self.traj = Trajectory(0, 0, 0, "bench-gateway", 0, "running", started_s=time.time())
        self.books = RequestBooks()
        self.chat = None
        self.answered = 0
        self.cpu_s = 0.0  # this episode's thread CPU spent answering

    def answer(self, request) -> tuple[int, dict]:
        from policies.chat.chat_session import ChatSession

        if self.chat is None or len(request.messages) == 2:  # a harness starting over: a new episode
            self.chat = ChatSession(self.tokenizer, self.harness.history, self.player.max_context_tokens)
        started_s = time.thread_time()
        answer = self.player.answer(request, self.chat, self.work, self.traj, self.engine, "bench", self.books)
        self.cpu_s += time.thread_time() - started_s
        self.answered += 1
        return answer


def direct_times(episode: Episode, calls: int, turns: int) -> list[float]:
    """Seconds per HarnessPlayer.answer for `calls` requests of conversations of `turns` requests."""
    from policies.chat.openai_wire import parse_chat_request

    times: list[float] = []
    messages = first_messages()
    for call in range(calls + turns):  # the first conversation warms the template and the tokenizer
        request = parse_chat_request(request_body(messages))
        started = time.perf_counter()
        status, body = episode.answer(request)
        elapsed = time.perf_counter() - started
        if status != 200:
            raise RuntimeError(f"the direct call was refused ({status}): {body}; the conversation must fit "
                               f"in the context (TURNS={turns})")
        if call >= turns:
            times.append(elapsed)
        turn = call % turns + 1
        messages = first_messages() if turn == turns else extend(messages, body["choices"][0]["message"], turn)
    return times


def serve(cfg: Config, tokenizer_path: str, core: int, sessions: int, calls: int, turns: int, conn) -> None:
    """The gateway's process, pinned to `core`: the direct baseline first, then the gateway and one
    episode thread per session until told to stop; then how its CPU split between answering and the rest."""
    from actors.episodes.gateway import POLICY_MODEL_ID, Gateway, GatewaySpec
    from policies.chat.chat_tokenizer import load_chat_tokenizer

    os.sched_setaffinity(0, {core})
    spec = GatewaySpec.from_config(cfg)
    tokenizer = load_chat_tokenizer(tokenizer_path)  # shared: encoding is thread-safe, as one per actor would be
    direct = direct_times(Episode(cfg, tokenizer, spec.max_model_len), calls, turns)
    serving_cpu_s = time.process_time()
    gateway = Gateway(POLICY_MODEL_ID, spec.max_model_len, spec.request_deadline_s, spec.step_s)
    port = gateway.listen_tcp()
    stop = threading.Event()
    opened = [gateway.open() for _ in range(sessions)]
    episodes = [Episode(cfg, tokenizer, spec.max_model_len) for _ in opened]
    threads = [threading.Thread(target=_answer_each, args=(s, e, stop), daemon=True) for s, e in zip(opened, episodes)]
    for thread in threads:
        thread.start()
    conn.send({"port": port, "sessions": [(s.sid, s.api_key) for s in opened], "direct_s": direct})
    conn.recv()  # stop
    stop.set()
    for thread in threads:
        thread.join(timeout=5)
    conn.send({"requests": sum(s.requests for s in opened), "refused": sum(s.refused for s in opened),
               "answered": sum(e.answered for e in episodes), "answer_cpu_s": sum(e.cpu_s for e in episodes),
               "serving_cpu_s": time.process_time() - serving_cpu_s})
    gateway.close()


def _answer_each(session, episode: Episode, stop: threading.Event) -> None:
    while not stop.is_set():
        pending = session.next_request(1.0)  # idle sessions wake rarely: their polling is not what is measured
        if pending is not None:
            pending.answer(*episode.answer(pending.request))


def gateway(cfg: Config, repetitions: int) -> dict:
    from actors.stages.policy_setup import ensure_policy

    tokenizer_path, _ = ensure_policy(cfg)
    cores = sorted(os.sched_getaffinity(0))
    server_core, load_core = cores[0], cores[-1]
    runs = [_repetition(cfg, tokenizer_path, server_core, load_core) for _ in range(repetitions)]
    medians = {key: statistics.median(r[key] for r in runs) for key in runs[0] if isinstance(runs[0][key], float)}
    per_s = medians["requests_per_s_one_core"]
    return {
        "figure": "one harness call through the gateway / the same call made directly (p50, zero-work engine)",
        "ratio": medians["gateway_p50_s"] / medians["direct_p50_s"], "baseline": medians["direct_p50_s"],
        "bound": None, "met": per_s >= TARGET_PER_S, **medians,
        "target": f">= {TARGET_PER_S:g} requests/s through the gateway on one core (per CPU-second of its process)",
        "ratio_p99": medians["gateway_p99_s"] / medians["direct_p99_s"], "runs": runs,
        "setup": {"sessions": SESSIONS, "latency_calls": LATENCY_CALLS, "throughput_s": THROUGHPUT_S,
                  "warmup_s": WARMUP_S, "turns_per_conversation": TURNS, "server_core": server_core,
                  "load_core": load_core, "shared_core": server_core == load_core, "tools": "bash (tool calls)"},
    }


def _repetition(cfg: Config, tokenizer_path: str, server_core: int, load_core: int) -> dict:
    ctx = multiprocessing.get_context("spawn")  # threads and an event loop in the children: never fork them
    server_end, server_child = ctx.Pipe()
    harness_end, harness_child = ctx.Pipe()
    server = ctx.Process(name="gateway server", target=serve, daemon=True, args=(
        cfg, tokenizer_path, server_core, SESSIONS, LATENCY_CALLS, TURNS, server_child))
    harness = None
    server.start()
    try:
        ready = _receive(server_end, server, STARTUP_TIMEOUT_S + LATENCY_CALLS * SLOW_CALL_S)
        harness = ctx.Process(name="gateway harness", target=run_harness, daemon=True, args=(
            ready["port"], ready["sessions"], server.pid, load_core, LATENCY_CALLS, TURNS, WARMUP_S, THROUGHPUT_S,
            harness_child))
        harness.start()
        measured = _receive(harness_end, harness,
                            STARTUP_TIMEOUT_S + LATENCY_CALLS * SLOW_CALL_S + 4 * (WARMUP_S + THROUGHPUT_S))
        server_end.send("stop")
        served = _receive(server_end, server, 30.0)
        harness.join(10)
        server.join(30)
    finally:
        for child in (harness, server):
            if child is not None and child.is_alive():
                child.terminate()
    direct, through = ready["direct_s"], measured["latency_s"]
    if served["refused"]:
        raise RuntimeError(f"the gateway refused {served['refused']} of the benchmark's requests")
    extending, first = measured["extending"], measured["first_request"]
    return {
        "direct_p50_s": percentile(direct, 0.5), "direct_p99_s": percentile(direct, 0.99),
        "gateway_p50_s": percentile(through, 0.5), "gateway_p99_s": percentile(through, 0.99),
        "added_p50_s": percentile(through, 0.5) - percentile(direct, 0.5),
        "added_p99_s": percentile(through, 0.99) - percentile(direct, 0.99),
        "server_cpu_per_call_s": measured["cpu_per_call_s"]["server"],
        "client_cpu_per_call_s": measured["cpu_per_call_s"]["client"],
        # One core's rate is requests per CPU-second of the pinned gateway process: on a shared machine
        # the wall-clock rate also counts the time other processes held that core (server_core_share).
        "requests_per_s_one_core": extending["requests_per_server_cpu_s"],
        "requests_per_s_wall": extending["requests_per_s"], "server_core_share": extending["server_cpu_fraction"],
        "load_core_share": extending["load_cpu_fraction"],
        "requests_per_s_one_core_first_request": first["requests_per_server_cpu_s"],
        "requests_per_s_wall_first_request": first["requests_per_s"],
        "under_load_p50_s": extending["p50_s"], "under_load_p99_s": extending["p99_s"],
        "served_requests": float(served["requests"]),
        # Of the serving process's CPU per request: the episode's answer, and everything else (HTTP,
        # JSON, the inbox hand-off, threads), over the whole run after the direct baseline.
        "answer_cpu_per_request_s": served["answer_cpu_s"] / served["answered"],
        "gateway_cpu_per_request_s": (served["serving_cpu_s"] - served["answer_cpu_s"]) / served["answered"],
        "throughput": {"extending": extending, "first_request": first},
    }


def _receive(conn, process, timeout_s: float):
    """The child's next message; a child that died or hangs is an error naming it (its traceback is on stderr)."""
    deadline = time.monotonic() + timeout_s
    while not conn.poll(0.5):
        if not process.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the benchmark's {process.name} sent nothing (alive: {process.is_alive()}, "
                               f"exit code {process.exitcode}, waited up to {timeout_s:g}s)")
    return conn.recv()
