"""`swerve bench scale`: how many concurrent episodes one machine holds, and what each costs.

Each level runs the real driver with N episode actors (each with its own sandbox actor) against
one simulated engine (engine.backend=sim, batch N) and a simulated trainer, with a batch of N
trajectories, so all N are in flight at once. A monitor polls the collector's books (peak
in-flight episodes) and the machine's available memory. Memory per concurrent episode is the
marginal cost between levels (fixed costs such as the engine, trainer and Ray itself cancel).
The collector's absorption rate is measured apart: completions per second it takes in, in its
own process (its logic) and as a Ray actor fed by several client processes (what a run sees).
"""
from __future__ import annotations

import statistics
import tempfile
import threading
import time
from dataclasses import replace

from configs import Config

LEVELS = (32, 128)
MACHINE_GB = 24  # the machine the issue sizes for: episodes it would hold at the measured cost
MEMORY_HEADROOM = 0.8  # a level runs only if its projected memory fits in this share of what is available
TRAJECTORY_TOKENS = 600
ABSORB_S = 3.0
ABSORB_CLIENTS = 4


def available_mb() -> float:
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["MemAvailable"].split()[0]) / 1024


def level_config(cfg: Config, n: int, run_dir: str) -> Config:
    sim = replace(cfg.engine.sim, step_base_s=0.01, step_per_request_s=0.0002, cap_fraction=1.0, command="true",
                  tokens_per_turn_min=24, tokens_per_turn_max=32)
    return replace(
        cfg,
        run=replace(cfg.run, name=f"scale-{n}", dir=run_dir, resume=False, status_interval_s=60.0,
                    trajectories_per_step=0),
        engine=replace(cfg.engine, backend="sim", num_engines=1, max_batch_size=n, sim=sim),
        trainer=replace(cfg.trainer, backend="sim", num_shards=1, sim_step_s=0.1, total_steps=2,
                        checkpoint_interval=0, kl_coef=0.0),
        rollout=replace(cfg.rollout, mode="async", max_staleness=1, group_size=8, groups_per_batch=n // 8,
                        num_episode_actors=n, max_turns=4, max_tokens_per_turn=32, drop_uniform_groups=False),
        faults=replace(cfg.faults, sandbox_kill_rate=0.0, sandbox_start_fail_rate=0.0, engine_kill_rate=0.0,
                       llm_error_rate=0.0, grader_crash_rate=0.0),
    )


class _Monitor(threading.Thread):
    """Peak in-flight episodes (the collector's books) and lowest available memory during a run."""

    def __init__(self, namespace: str):
        super().__init__(daemon=True)
        self.namespace, self.peak_in_flight, self.min_available_mb = namespace, 0, available_mb()
        self.done = threading.Event()

    def run(self) -> None:
        import ray

        collector = None
        while not self.done.wait(0.5):
            self.min_available_mb = min(self.min_available_mb, available_mb())
            try:
                collector = collector or ray.get_actor("collector", namespace=self.namespace)
                self.peak_in_flight = max(self.peak_in_flight, ray.get(collector.accounting.remote())["in_flight"])
            except ValueError:
                continue  # not started yet, or already gone


def run_level(cfg: Config) -> dict:
    from actors.driver import train
    from actors.launch import namespace

    before = available_mb()
    monitor = _Monitor(namespace(cfg))
    monitor.start()
    started = time.perf_counter()
    try:
        train(cfg)
    finally:
        monitor.done.set()
        monitor.join()
    return {"episodes": cfg.rollout.num_episode_actors, "peak_in_flight": monitor.peak_in_flight,
            "memory_used_mb": before - monitor.min_available_mb, "seconds": time.perf_counter() - started}


def collector_absorption(seconds: float = ABSORB_S, clients: int = ABSORB_CLIENTS) -> dict:
    """Completions per second the collector takes in: in-process, and as a Ray actor."""
    import ray

    from actors.remote import RemoteCollector
    from actors.sample_collector import SampleCollector
    from configs.schema import RolloutConfig

    cfg = RolloutConfig(group_size=8, groups_per_batch=4, max_staleness=10**9)
    tasks = [f"task-{i}" for i in range(64)]
    local = SampleCollector(cfg, tasks, tasks, seed=0)
    count, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        local.submit(_finished(local.acquire("bench")))
        count += 1
        if count % 32 == 0:
            local.next_batch(1.0)
    in_process = count / seconds

    remote = RemoteCollector.options(num_cpus=0).remote(cfg, tasks, tasks, 0)
    feed = ray.remote(num_cpus=0)(_feed)
    refs = [feed.remote(remote, seconds, f"client-{i}") for i in range(clients)]
    drained = 0
    while ray.wait(refs, num_returns=len(refs), timeout=0.1)[1]:
        drained += 1 if ray.get(remote.next_batch.remote(1.0)) is not None else 0
    via_ray = sum(ray.get(refs)) / seconds
    ray.kill(remote)
    return {"in_process_per_s": in_process, "via_ray_per_s": via_ray, "clients": clients,
            "trajectory_tokens": TRAJECTORY_TOKENS, "batches_drained": drained}


def _finished(item):
    from actors.trajectory import Trajectory

    n = TRAJECTORY_TOKENS
    return Trajectory(item.group_id, item.member, item.attempt, item.task_id, item.admitted_version,
                      outcome="unresolved", reward=float(item.member % 2), token_ids=list(range(n)),
                      loss_mask=[0] * 100 + [1] * (n - 100), logprobs=[-0.5] * n, versions=[0] * n,
                      started_s=0.0, finished_s=1.0, turns=4)


def _feed(collector, seconds: float, name: str) -> int:
    """A client process acquiring and submitting as fast as the collector answers."""
    import ray

    count, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        ray.get(collector.submit.remote(_finished(ray.get(collector.acquire.remote(name)))))
        count += 1
    return count


def scale(cfg: Config, repetitions: int) -> dict:
    from actors.launch import init_ray

    init_ray(cfg)
    work = tempfile.mkdtemp(prefix="swerve-bench-scale-")
    levels: list[dict] = []
    for n in LEVELS:
        if levels:
            per_episode = levels[-1]["memory_used_mb"] / levels[-1]["episodes"]
            if per_episode * n > MEMORY_HEADROOM * available_mb():
                break  # this level would not fit: the last one is as far as this machine goes
        levels.append(run_level(level_config(cfg, n, work)))
    absorb = [collector_absorption() for _ in range(repetitions)]
    reached = max(level["peak_in_flight"] for level in levels)
    if len(levels) >= 2:
        low, high = levels[0], levels[-1]
        per_episode_mb = (high["memory_used_mb"] - low["memory_used_mb"]) / (high["episodes"] - low["episodes"])
    else:
        per_episode_mb = levels[0]["memory_used_mb"] / levels[0]["episodes"]
    rate = statistics.median(a["via_ray_per_s"] for a in absorb)
    return {
        "figure": "concurrent episodes reached / 128 (the target; the reference run held 96 per node)",
        "ratio": reached / 128, "baseline": 128, "bound": None,
        "target": ">= 128 concurrent episodes on one node; collector >= 5000 completions/s",
        "met": reached >= 128 and rate >= 5000,
        "concurrent_episodes": reached, "memory_per_episode_mb": per_episode_mb,
        "episodes_per_24gb_projected": MACHINE_GB * 1024 / per_episode_mb,
        "collector_completions_per_s": rate,
        "collector_in_process_per_s": statistics.median(a["in_process_per_s"] for a in absorb),
        "levels": levels, "absorption_runs": absorb,
        "setup": {"levels_tried": LEVELS, "engine": "sim (1 engine, batch = episodes)", "trainer": "sim",
                  "sandbox": cfg.sandbox.backend, "available_mb_at_start": available_mb()},
    }
