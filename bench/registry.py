"""`swerve bench NAME`: one benchmark, its JSON in bench/results/NAME.json, and BENCHMARKS.md regenerated.

Every figure is a ratio against a baseline measured in the same run (median of repetitions);
absolute times are informational. No benchmark asserts anything: targets are reported.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import threading
import time
from pathlib import Path
from typing import Callable

from bench.adversarial.grading_cost import grading_cost
from bench.throughput.async_vs_sync import async_vs_sync
from bench.throughput.gateway import gateway
from bench.throughput.multiturn_rollout import multiturn_rollout
from bench.throughput.profile import profile
from bench.resilience.reliability import reliability
from bench.throughput.scale import scale
from bench.throughput.turn_overhead import turn_overhead
from configs import Config
from configs.schema import SandboxConfig

RESULTS_DIR = Path("bench/results")
# `make check`'s last result per check (tests/suite_clock.py records them), shown below the benchmarks.
CHECKS_DIR = RESULTS_DIR / "check"
TABLE = Path("BENCHMARKS.md")


def engine_throughput(cfg: Config, repetitions: int) -> dict:
    """CPU engine tokens/s at concurrency 1, 8, 32 (continuous batching) vs one request at a time."""
    from actors.stages.policy_setup import ensure_policy
    from bench.throughput.engine_throughput import measure_throughput

    _, model_path = ensure_policy(cfg)
    runs = [measure_throughput(model_path, (1, 8, 32), torch_threads=cfg.engine.torch_threads)
            for _ in range(repetitions)]
    speedup8 = statistics.median(r["speedup"][8] for r in runs)
    return {
        "figure": "tokens/s at concurrency 8 / one-at-a-time", "ratio": speedup8, "target": ">= 3.0",
        "met": speedup8 >= 3.0, "bound": None, "ratio_batched_over_sequential": speedup8,
        "baseline": statistics.median(r["baseline_tokens_per_s"] for r in runs),
        "details": {"speedup_median": {c: statistics.median(r["speedup"][c] for r in runs) for c in (8, 32)},
                    "runs": runs},
    }


def sandbox_start(cfg: Config, repetitions: int) -> dict:
    """Lease start p50/p95 at concurrency 1, 16, 64, cold and from the warm pool: the configured
    backend (local bubblewrap), and docker beside it where an engine answers (its containers from
    the offline base image; the reference: 11.7 s for local Docker under load, 1.9 s for E2B)."""
    from dataclasses import replace

    from envs.sandboxes import docker_engine

    local = _start_times(cfg.sandbox, repetitions)
    warm, cold = local["warm_c1"]["p50_s"], local["cold_c1"]["p50_s"]
    result = {
        "figure": "warm / cold lease start p50 at concurrency 1", "ratio": warm / cold, "baseline": cold,
        "warm_p50_s": warm, "cold_p50_s": cold,
        "target": "p50 <= 0.020 s warm, <= 0.100 s cold",
        "met": warm <= 0.020 and cold <= 0.100, "bound": None, "details": {cfg.sandbox.backend: local},
    }
    reason = docker_engine.engine_reason()
    if cfg.sandbox.backend != "docker" and reason is None:
        docker = _start_times(replace(cfg.sandbox, backend="docker", docker_image=docker_engine.ensure_base_image()),
                              repetitions)
        result["details"]["docker"] = docker
        result["docker_warm_p50_s"], result["docker_cold_p50_s"] = docker["warm_c1"]["p50_s"], docker["cold_c1"]["p50_s"]
        result["docker_cold_p50_s_c64"] = docker["cold_c64"]["p50_s"]
    else:
        result["details"]["docker"] = reason or "measured as the configured backend"
    return result


# The lease-start levels of `sandbox_start` (leases started at once).
START_CONCURRENCY = (1, 16, 64)


def _start_times(sandbox: SandboxConfig, repetitions: int) -> dict:
    from dataclasses import replace

    from actors.episodes.sandbox_actor import SANDBOX_BACKENDS
    from envs.tasks.loaders import load_tasks

    task = load_tasks("builtin", "train")[0]
    results = {}
    for mode, pool_size in (("cold", 0), ("warm", 1)):
        sandbox_cfg = replace(sandbox, pool_size=pool_size)
        for concurrency in START_CONCURRENCY:
            times = _lease_starts(lambda: SANDBOX_BACKENDS[sandbox.backend](sandbox_cfg), task, concurrency,
                                  rounds=repetitions + 1)
            results[f"{mode}_c{concurrency}"] = {"p50_s": statistics.median(times),
                                                 "p95_s": sorted(times)[int(0.95 * (len(times) - 1))]}
    return results


def _lease_starts(make, task, concurrency: int, rounds: int) -> list[float]:
    """Start `concurrency` leases at once, `rounds` times; the first round only warms pools."""
    sandboxes = [make() for _ in range(concurrency)]
    times: list[float] = []
    try:
        for round_index in range(rounds):
            lock = threading.Lock()

            def one(sandbox):
                t0 = time.perf_counter()
                sandbox.start(task)
                elapsed = time.perf_counter() - t0
                with lock:
                    if round_index:
                        times.append(elapsed)

            threads = [threading.Thread(target=one, args=(s,)) for s in sandboxes]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            time.sleep(0.2)  # lets a pool refill, as it would between episodes
    finally:
        for sandbox in sandboxes:
            sandbox.close()
    return times


def weight_sync(cfg: Config, repetitions: int) -> dict:
    """Seconds to push the model's weights into 2 engines (EngineSet.sync: the driver's path) vs 1."""
    from dataclasses import replace

    import ray

    from actors.fleet.engine_set import EngineSet
    from actors.fleet.launch import init_ray, namespace
    from actors.stages.policy_setup import ensure_policy
    from policies.engines.process import weights_file_bytes
    from policies.model import load_model

    init_ray(cfg)
    _, model_path = ensure_policy(cfg)
    state = {k: v.detach().clone() for k, v in load_model(model_path).state_dict().items()}
    size_mb = sum(v.numel() * v.element_size() for v in state.values()) / 2**20
    weights = weights_file_bytes(state)  # as the trainer exports them (TrainerShard.export_weights)
    times: dict = {}
    for engines in (1, 2):
        engine_set = EngineSet(replace(cfg.engine, num_engines=engines), model_path, namespace(cfg)).start()
        try:
            times[engines] = []
            for version in range(1, repetitions + 2):
                started = time.perf_counter()
                engine_set.sync(ray.put(weights), version)  # ray.put included: the driver pays it too
                if version > 1:  # the first push also warms the engines' weight path
                    times[engines].append(time.perf_counter() - started)
        finally:
            for handle in engine_set.handles:
                ray.kill(handle)
    one, two = statistics.median(times[1]), statistics.median(times[2])
    return {
        "figure": "weight push to 2 engines / to 1 engine (seconds)", "ratio": two / one, "baseline": one,
        "bound": None, "target": "2 engines <= 1.5x one (pushes run in parallel)", "met": two <= 1.5 * one,
        "seconds_two_engines": two, "seconds_one_engine": one, "weights_mb": size_mb,
        "mb_per_s_two_engines": 2 * size_mb / two, "engine_backend": cfg.engine.backend, "runs": times,
    }


def _reliability_report(result: dict) -> None:
    from bench.resilience.reliability import write_report

    write_report(result)


BENCHMARKS: dict[str, Callable[[Config, int], dict]] = {
    "async_vs_sync": async_vs_sync,
    "engine_throughput": engine_throughput,
    "sandbox_start": sandbox_start,
    "turn_overhead": turn_overhead,
    "scale": scale,
    "weight_sync": weight_sync,
    "reliability": reliability,
    "multiturn_rollout": multiturn_rollout,
    "gateway": gateway,
    "profile": profile,
    "grading": grading_cost,
}
# Benchmarks that also write a report of their own next to the table.
REPORTS: dict[str, Callable[[dict], None]] = {"reliability": _reliability_report}


def run_benchmark(name: str, cfg: Config, repetitions: int) -> dict:
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark '{name}'; available: {', '.join(sorted(BENCHMARKS))}")
    started = time.perf_counter()
    result = {"name": name, **BENCHMARKS[name](cfg, repetitions), "repetitions": repetitions,
              "seconds": time.perf_counter() - started, "machine": _machine(),
              "date": datetime.date.today().isoformat()}
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    write_table()
    if name in REPORTS:
        REPORTS[name](result)
    return result


def _machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}"


# The figures scripts read from each result, shown in the table's last column.
KEY_FIGURES = {
    "async_vs_sync": ("ratio_async_over_sync", "ideal_ratio_over_sync", "efficiency_async_over_ideal",
                      "efficiency_heavy_tail_age", "efficiency_heavy_tail_fifo", "efficiency_heavy_tail_token",
                      "trainer_idle_fraction_heavy_tail_token", "efficiency_reference_token",
                      "trainer_idle_fraction_async", "trainer_idle_fraction_sync"),
    "sandbox_start": ("warm_p50_s", "cold_p50_s", "docker_warm_p50_s", "docker_cold_p50_s", "docker_cold_p50_s_c64"),
    "turn_overhead": ("median_s",),
    "scale": ("concurrent_episodes", "memory_per_episode_mb", "collector_completions_per_s"),
    "engine_throughput": ("ratio_batched_over_sequential",),
    "weight_sync": ("seconds_two_engines", "seconds_one_engine"),
    "multiturn_rollout": ("tokens_per_s_cache_on", "tokens_per_s_cache_off", "token_identical"),
    "gateway": ("added_p50_s", "added_p99_s", "requests_per_s_one_core", "requests_per_s_wall", "server_core_share",
                "requests_per_s_one_core_first_request"),
    "profile": ("step_wall_s", "floor_wall_s", "idle_core_s_mean", "dropped_generated_share"),
}


def write_table() -> None:
    rows = ["# Benchmarks", "", "Generated by `swerve bench NAME` from `bench/results/*.json`; ratios are against a "
            "baseline measured in the same run (median of the repetitions).", "",
            "| benchmark | figure | baseline | ratio | bound | target | met | key figures | machine | date |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for path in sorted(RESULTS_DIR.glob("*.json")):
        r = json.loads(path.read_text())
        keys = ", ".join(f"{k} {_num(r[k])}" for k in KEY_FIGURES.get(r["name"], ()) if k in r) or "-"
        rows.append(f"| {r['name']} | {r['figure']} | {_num(r['baseline'])} | {_num(r['ratio'])} | "
                    f"{_num(r['bound'])} | {r['target']} | {'yes' if r['met'] else 'no'} | {keys} | {r['machine']} | "
                    f"{r['date']} |")
    profiled = RESULTS_DIR / "profile.json"
    if profiled.is_file():  # swerve bench profile: the RL step by kind of work, beside its floor
        r = json.loads(profiled.read_text())
        rows += ["", "## The RL step, profiled", "", f"`swerve bench profile` ({r['date']}, {r['machine']}): CPU-seconds "
                 "per steady step by process kind, split by what py-spy saw each kind do; flame graphs in "
                 "bench/results/profile/.", "", *r["table"]]
    checks = sorted(CHECKS_DIR.glob("*.json"))
    if checks:
        rows += ["", "## `make check`", "", "The second tier (docs/contracts.md lists what it holds and why): each "
                 "check's last result, recorded by the run that played it (`make check`, or one alone with "
                 "`make check CHECK=<test>`).", "",
                 "| check | cases | passed | failed | skipped | seconds | machine | date |", "|---|---|---|---|---|---|---|---|"]
        for path in checks:
            c = json.loads(path.read_text())
            rows.append(f"| `{c['check']}` | {c['cases']} | {c['passed']} | {c['failed']} | {c['skipped']} | "
                        f"{c['seconds']:.0f} | {c['machine']} | {c['date']} |")
    TABLE.write_text("\n".join(rows) + "\n")


def record_checks(checks: list[dict]) -> None:
    """Each check's result (check, cases, passed, failed, skipped, seconds) as its last, and the table."""
    CHECKS_DIR.mkdir(parents=True, exist_ok=True)
    for check in checks:
        name = check["check"].replace("/", ".").replace("::", "--")
        row = {**check, "machine": _machine(), "date": datetime.date.today().isoformat()}
        (CHECKS_DIR / f"{name}.json").write_text(json.dumps(row, indent=2) + "\n")
    write_table()


def _num(value) -> str:
    return "-" if value is None else f"{value:.4g}"
