"""Throughput of the CPU server: tokens/s at several concurrencies vs one request at a time.

`measure_throughput` starts one server (a subprocess by default, as the EngineActor runs
it), warms it up, then for each concurrency level keeps that many `/generate` calls in
flight until `requests_per_level` finish. Every request generates exactly
`max_new_tokens` tokens (`ignore_eos`), so tokens/s compare like for like. The baseline is
one-at-a-time generation through the same server in the same run.
"""
from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from typing import Any, Dict, Optional, Sequence

from policies.seeds import derive_seed
from policies.engines import protocol

# The warm-up's prompts come from derive_seed(seed, WARMUP_STREAM); the measured ones from seed.
WARMUP_STREAM = -1


async def _run_level(url: str, concurrency: int, num_requests: int, prompt_len: int,
                     max_new_tokens: int, vocab: int, seed: int) -> Dict[str, Any]:
    import aiohttp

    queue: asyncio.Queue = asyncio.Queue()
    for i in range(num_requests):
        queue.put_nowait(i)
    tokens = 0
    latencies = []

    async def worker(session):
        nonlocal tokens
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            rng = random.Random(derive_seed(seed, i))  # clear of the first and last 5 ids (special tokens)
            prompt = [rng.randrange(5, vocab - 5) for _ in range(prompt_len)]
            body = protocol.generate_request(prompt, max_new_tokens=max_new_tokens,
                                             temperature=1.0, sampling_seed=derive_seed(seed, i),
                                             return_logprob=True)
            body["sampling_params"]["ignore_eos"] = True
            start = time.perf_counter()
            async with session.post(url + protocol.GENERATE, json=body) as response:
                response.raise_for_status()
                data = await response.json()
            latencies.append(time.perf_counter() - start)
            tokens += len(data["output_ids"])

    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        start = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "concurrency": concurrency,
        "requests": num_requests,
        "tokens": tokens,
        "seconds": elapsed,
        "tokens_per_s": tokens / elapsed if elapsed > 0 else 0.0,
        "p50_latency_s": latencies[len(latencies) // 2] if latencies else 0.0,
    }


def _wait_ready(url: str, proc: Optional[subprocess.Popen], timeout: float) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before becoming ready")
        try:
            with urllib.request.urlopen(url + protocol.HEALTH, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"server at {url} not ready after {timeout}s")


def measure_throughput(
    model_path: str,
    concurrency_levels: Sequence[int] = (1, 8, 32),
    *,
    requests_per_level: Optional[int] = None,
    max_new_tokens: int = 64,
    prompt_len: int = 32,
    max_batch_size: Optional[int] = None,
    max_context_tokens: int = 4096,
    torch_threads: int = 1,
    in_process: bool = False,
    seed: int = 0,
) -> Dict[str, Any]:
    """Return {"levels": {c: {...tokens_per_s...}}, "baseline_tokens_per_s",
    "speedup": {c: x}, "config": {...}}; the baseline is concurrency 1 (one at a time)."""
    from policies.server.app import start_server
    from policies.engines.process import free_port
    from policies.tokenizer import load_tokenizer

    levels = sorted({int(c) for c in concurrency_levels} | {1})
    batch = max_batch_size or max(levels)
    vocab = len(load_tokenizer(model_path))  # model dirs from ensure_model carry their tokenizer
    handle = proc = None
    if in_process:
        handle = start_server(model_path, max_batch_size=batch,
                              max_context_tokens=max_context_tokens, torch_threads=torch_threads)
        url = handle.url
    else:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "policies.server", "--model-path", model_path,
             "--port", str(port), "--max-batch-size", str(batch),
             "--max-context-tokens", str(max_context_tokens),
             "--torch-threads", str(torch_threads)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        _wait_ready(url, proc, timeout=120)
        # warm-up: first forwards allocate and pick kernels (on other prompts than those measured)
        asyncio.run(_run_level(url, 2, 2, prompt_len, 4, vocab, derive_seed(seed, WARMUP_STREAM)))
        results = {}
        for level in levels:
            count = requests_per_level or max(4 * level, 16)
            results[level] = asyncio.run(_run_level(
                url, level, count, prompt_len, max_new_tokens, vocab, seed))
    finally:
        if handle is not None:
            handle.stop()
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    baseline = results[1]["tokens_per_s"]
    return {
        "levels": results,
        "baseline_tokens_per_s": baseline,
        "speedup": {c: (r["tokens_per_s"] / baseline if baseline else 0.0)
                    for c, r in results.items()},
        "config": {"model_path": model_path, "max_new_tokens": max_new_tokens,
                   "prompt_len": prompt_len, "max_batch_size": batch,
                   "torch_threads": torch_threads, "in_process": in_process},
    }


if __name__ == "__main__":
    import json

    from actors.stages.policy_setup import ensure_policy
    from configs import Config

    path = sys.argv[1] if len(sys.argv) > 1 else ensure_policy(Config())[1]
    print(json.dumps(measure_throughput(path), indent=2))
