"""The harness side of `swerve bench gateway`: its conversation, and its calls over HTTP from a
process pinned to its own core.

One conversation at a time with httpx (keep-alive) for the added latency, then one conversation
per session at once with aiohttp for the throughput, counted over a fixed window after a warm-up.
"""
from __future__ import annotations

import asyncio
import os
import time

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")

TOOLS = [{"type": "function", "function": {
    "name": "bash", "description": "Run a shell command in the repository and return its output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
SYSTEM = "You are a software engineer fixing an issue in a Python repository. Use the bash tool, one command at a time."
TASK = ("The function `parse_size` in src/units.py returns 1000 for '1K' but the docs say 1024. Fix it so that "
        "binary prefixes are used, and keep the tests in tests/test_units.py passing.")
REPLY = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la src/"}}\n</tool_call>'


def tool_output(turn: int) -> str:
    """A short command output that differs per turn, as a shell's would."""
    return f"total {8 * turn}\n-rw-r--r-- 1 root root {812 + turn} units.py\n-rw-r--r-- 1 root root 96 __init__.py"


def first_messages() -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]


def extend(messages: list[dict], reply_message: dict, turn: int) -> list[dict]:
    """The harness's next request: what it sent, the reply it got, then each tool call's output."""
    calls = reply_message.get("tool_calls") or []
    if not calls:
        raise RuntimeError(f"the zero-work reply carried no tool call: {reply_message!r}")
    return messages + [reply_message] + [{"role": "tool", "tool_call_id": call["id"], "content": tool_output(turn)}
                                         for call in calls]


def request_body(messages: list[dict]) -> dict:
    return {"model": "swerve-policy", "messages": messages, "tools": TOOLS}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))]


def run_harness(port: int, sessions: list, server_pid: int, core: int, calls: int, turns: int, warmup_s: float,
         duration_s: float, conn) -> None:
    os.sched_setaffinity(0, {core})
    server_cpu_s, client_cpu_s = _server_cpu_s(server_pid), time.process_time()
    latency_s = sequential_latency(port, sessions[0], calls, turns)
    # CPU per call on each side: how the added latency splits between the client library and the gateway
    cpu_per_call_s = {"server": (_server_cpu_s(server_pid) - server_cpu_s) / (calls + turns),
                      "client": (time.process_time() - client_cpu_s) / (calls + turns)}
    extending = asyncio.run(throughput(port, sessions, server_pid, turns, warmup_s, duration_s))
    first = asyncio.run(throughput(port, sessions, server_pid, 1, warmup_s, duration_s))
    conn.send({"latency_s": latency_s, "cpu_per_call_s": cpu_per_call_s, "extending": extending,
               "first_request": first})


def _url(port: int, sid: str) -> str:
    return f"http://127.0.0.1:{port}/sessions/{sid}/v1/chat/completions"


def _refused(status: int, body) -> RuntimeError:
    return RuntimeError(f"the gateway answered {status}: {body}")


def sequential_latency(port: int, session: tuple, calls: int, turns: int) -> list[float]:
    """Seconds per call, request encoding to reply decoding, for `calls` calls after one warm-up conversation."""
    import httpx

    sid, key = session
    times: list[float] = []
    messages = first_messages()
    with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=60.0) as client:
        for call in range(calls + turns):
            started = time.perf_counter()
            response = client.post(_url(port, sid), json=request_body(messages))
            body = response.json()
            elapsed = time.perf_counter() - started
            if response.status_code != 200:
                raise _refused(response.status_code, body)
            if call >= turns:
                times.append(elapsed)
            turn = call % turns + 1
            messages = first_messages() if turn == turns else extend(messages, body["choices"][0]["message"], turn)
    return times


def _server_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid`, all its threads (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S  # utime, stime: fields 14 and 15


async def throughput(port: int, sessions: list, server_pid: int, turns: int, warmup_s: float,
                     duration_s: float) -> dict:
    """Requests per second with every session's conversation running at once, over `duration_s`."""
    import aiohttp

    loop = asyncio.get_running_loop()
    window_start = loop.time() + warmup_s
    window_end = window_start + duration_s
    latencies: list[float] = []
    marks: list[tuple] = []

    async def converse(http: aiohttp.ClientSession, sid: str, key: str) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        messages, sent = first_messages(), 0
        while loop.time() < window_end:
            started = loop.time()
            async with http.post(_url(port, sid), json=request_body(messages), headers=headers) as response:
                body = await response.json()
                status = response.status
            done = loop.time()
            if status != 200:
                raise _refused(status, body)
            if window_start <= done <= window_end:
                latencies.append(done - started)
            sent += 1
            messages = first_messages() if sent % turns == 0 else \
                extend(messages, body["choices"][0]["message"], sent % turns)

    async def mark(at: float) -> None:
        await asyncio.sleep(max(0.0, at - loop.time()))
        marks.append((loop.time(), _server_cpu_s(server_pid), time.process_time()))

    connector = aiohttp.TCPConnector(limit=0)  # one keep-alive connection per conversation
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60.0)) as http:
        await asyncio.gather(*(converse(http, sid, key) for sid, key in sessions), mark(window_start), mark(window_end))
    (t0, server0, load0), (t1, server1, load1) = marks
    if not latencies:
        raise RuntimeError(f"no request finished inside the {duration_s:g}s window")
    return {"requests": len(latencies), "requests_per_s": len(latencies) / duration_s,
            "p50_s": percentile(latencies, 0.5), "p99_s": percentile(latencies, 0.99),
            "server_cpu_fraction": (server1 - server0) / (t1 - t0), "load_cpu_fraction": (load1 - load0) / (t1 - t0),
            "requests_per_server_cpu_s": len(latencies) / max(server1 - server0, 1.0 / CLOCK_TICKS_PER_S),
            "conversations": len(sessions), "turns_per_conversation": turns}
