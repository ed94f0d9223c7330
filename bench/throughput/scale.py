"""`swerve bench scale`: how many concurrent episodes one machine holds, and what each costs.

Each level starts a run's fleet (actors.fleet.launch, as the driver does) with N episode actors, each
with its own sandbox actor, against one simulated engine (engine.backend=sim, batch N) and no
admission limit, and waits until all N episodes are in flight at once (the collector's books) with
all N sandbox actors up (an episode creates its sandbox actor on its first start, seconds after it
took its work; counted by process when this process started the level's Ray), then ends the fleet.
A level runs only if the memory it is projected to need fits, and is ended early if the machine runs
short. Memory per concurrent episode is the marginal cost between levels (fixed costs such as the
engine, trainer and Ray itself cancel); where it goes is read once all N are in flight, by kind of
process (bench/throughput/process_memory.py: the episode actors, the sandbox actors, what each runs,
Ray's own daemons), when the level's Ray was started by this process (its processes descend from it).
The collector's absorption rate is measured apart: completions per second it takes in, in its own
process (its logic) and as a Ray actor fed by several client processes (what a run sees), beside
Ray's own floor for the same calls (an actor that only hands back a work item, one completion per
call and BATCH per call) and the reference run's rate.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import replace

from bench.throughput.process_cpu import RAY_SYSTEM
from bench.throughput.process_memory import memory_by_kind, processes_by_kind
from configs import Config
from configs.schema import FaultsConfig

# The first two measure the marginal cost per episode; each later one runs only if it fits.
LEVELS = (16, 32, 96, 128)
MACHINE_GB = 24  # the machine the issue sizes for: episodes it would hold at the measured cost
MEMORY_HEADROOM = 0.9  # a level runs only if its projected memory fits in this share of what is available
MEMORY_FLOOR_MB = 1500  # a level is ended when the machine's available memory falls below this
SANDBOX_ACTORS = "sandbox actors"  # bench/throughput/process_cpu.py's kind of SandboxActor processes
# The process kinds that each episode adds (its two actors and what they run), per episode of a level.
EPISODE_KINDS = ("episode actors", "sandbox actors", "commands of episode actors", "commands of sandbox actors")
# 128 episodes start 256 Ray workers, Ray starting as many at once as there are CPUs, while those
# already up run their turns: on 2 cores the 128 level took 431 s to have all of them up.
LEVEL_TIMEOUT_S = 900.0
POLL_S = 2.0  # each poll walks the level's process tree (~500 processes at 128): CPU the ramp needs
HOLD_S = 3.0  # all N must stay in flight this long
HELD = "all in flight"  # a level's outcome when it held all its episodes
TRAJECTORY_TOKENS = 600
ABSORB_S = 3.0
ABSORB_CLIENTS = 4
PIPELINE = 32  # exchanges each absorption client keeps in flight
BATCH = 16  # completions per call in the batched floor
REFERENCE_PER_S = 3480 / 3600  # the reference run's ~3,480 trajectories per hour (384 concurrent)


class EchoSource:
    """Ray's floor: takes finished trajectories and hands back a work item, keeping no books."""

    def __init__(self, item):
        self.item = item

    def acquire(self, worker: str = ""):
        return self.item

    def exchange(self, traj, worker: str = ""):
        return self.item

    def exchange_many(self, trajs: list, worker: str = "") -> list:
        return [self.item] * len(trajs)


def available_mb() -> float:
    return _meminfo_mb("MemAvailable")


def level_config(cfg: Config, n: int) -> Config:
    # Long episodes (turn cap 1000, seconds per turn, so the turns' CPU leaves room for actor
    # starts on 2 cores): none ends while the level is measured.
    sim = replace(cfg.engine.sim, step_base_s=0.1, step_per_request_s=0.0002, cap_fraction=1.0, command="true",
                  tokens_per_turn_min=24, tokens_per_turn_max=32)
    return replace(
        cfg,
        run=replace(cfg.run, name=f"scale-{n}"),
        engine=replace(cfg.engine, backend="sim", num_engines=1, max_batch_size=n, max_context_tokens=65536, sim=sim),
        rollout=replace(cfg.rollout, mode="async", max_staleness=10**9, group_size=8, num_episode_actors=n,
                        max_turns=1000, max_tokens_per_turn=32, max_total_tokens=65536, max_episode_seconds=3600.0),
        faults=FaultsConfig(),  # none injected
    )


def run_level(cfg: Config, model_path: str, tokenizer_path: str, tasks: list) -> dict:
    import ray

    from actors.fleet.launch import kill, launch, start_episodes

    n = cfg.rollout.num_episode_actors
    before = available_mb()
    started = time.perf_counter()
    fleet = launch(cfg, model_path, tasks, with_trainers=False)
    peak, lowest, held_since, outcome, by_kind = 0, before, None, "timed out", {}
    peak_sandboxes = None  # stays None when the level's processes are not this process's descendants
    try:
        start_episodes(fleet, cfg, tokenizer_path)
        while time.perf_counter() - started < LEVEL_TIMEOUT_S:
            in_flight = fleet.collector.accounting()["in_flight"]
            peak, lowest = max(peak, in_flight), min(lowest, available_mb())
            if lowest < MEMORY_FLOOR_MB:
                outcome = "ended: the machine ran short of memory"
                break
            sandboxes = _sandbox_actors()
            if sandboxes is not None:
                peak_sandboxes = max(peak_sandboxes or 0, sandboxes)
            all_up = in_flight == n and (sandboxes is None or sandboxes >= n)
            held_since = (held_since or time.perf_counter()) if all_up else None
            if held_since and time.perf_counter() - held_since >= HOLD_S:
                outcome, by_kind = HELD, memory_by_kind(os.getpid())
                break
            time.sleep(POLL_S)
    finally:
        fleet.collector.stop()
        kill(fleet)
        _wait_for_memory_back(before)
    return {"episodes": n, "peak_in_flight": peak, "peak_sandbox_actors": peak_sandboxes,
            "memory_used_mb": before - lowest, "outcome": outcome, "seconds": time.perf_counter() - started,
            "memory_by_kind": by_kind}


def _sandbox_actors():
    """Sandbox actors alive now, or None when Ray's processes are not this process's descendants
    (a cluster it joined: only the collector's books count then)."""
    kinds = processes_by_kind(os.getpid())
    return kinds.get(SANDBOX_ACTORS, 0) if RAY_SYSTEM in kinds else None


def concurrent(level: dict) -> int:
    """Episodes a level held at once: in flight, each with its sandbox actor up where counted."""
    sandboxes = level["peak_sandbox_actors"]
    return level["peak_in_flight"] if sandboxes is None else min(level["peak_in_flight"], sandboxes)


def collector_absorption(seconds: float = ABSORB_S, clients: int = ABSORB_CLIENTS) -> dict:
    """Completions per second the collector takes in: in-process, and as a Ray actor."""
    import ray

    from actors.fleet.remote import RemoteCollector
    from actors.training.sample_collector import SampleCollector
    from configs.schema import RolloutConfig

    cfg = RolloutConfig(group_size=8, groups_per_batch=4, max_staleness=10**9)
    tasks = [f"task-{i}" for i in range(64)]
    local = SampleCollector(cfg, tasks, tasks, seed=0)
    count, deadline, item = 0, time.perf_counter() + seconds, local.acquire("bench")
    while time.perf_counter() < deadline:
        item = local.exchange(_finished(item), "bench")
        count += 1
        if count % 32 == 0:
            local.next_batch(1.0)
    in_process = count / seconds

    remote = RemoteCollector.options(num_cpus=0).remote(cfg, tasks, tasks, 0)
    via_ray = _fed_rate(remote, seconds, clients, lambda: ray.get(remote.next_batch.remote(1.0)))
    ray.kill(remote)
    echo = ray.remote(num_cpus=0)(EchoSource).remote(item)
    floor = _fed_rate(echo, seconds, clients)
    floor_batched = _fed_rate(echo, seconds, clients, per_call=BATCH)
    ray.kill(echo)
    return {"in_process_per_s": in_process, "via_ray_per_s": via_ray, "ray_floor_per_s": floor,
            "ray_floor_batched_per_s": floor_batched, "clients": clients, "pipeline": PIPELINE, "batch": BATCH,
            "trajectory_tokens": TRAJECTORY_TOKENS}


def _fed_rate(source, seconds: float, clients: int, drain=None, per_call: int = 1) -> float:
    """Completions per second that `clients` feeding processes get through `source`."""
    import ray

    feed = ray.remote(num_cpus=0)(_feed)
    refs = [feed.remote(source, seconds, f"client-{i}", per_call) for i in range(clients)]
    while ray.wait(refs, num_returns=len(refs), timeout=0.1)[1]:
        if drain is not None:
            drain()  # batches leave the collector as the trainer takes them
    return sum(ray.get(refs)) / seconds


def _finished(item):
    from actors.episodes.trajectory import Trajectory

    n = TRAJECTORY_TOKENS
    return Trajectory(item.group_id, item.member, item.attempt, item.task_id, item.admitted_version,
                      outcome="unresolved", reward=float(item.member % 2), token_ids=list(range(n)),
                      loss_mask=[0] * 100 + [1] * (n - 100), logprobs=[-0.5] * n, versions=[0] * n,
                      started_s=0.0, finished_s=1.0, turns=4)


def _feed(source, seconds: float, name: str, per_call: int = 1) -> int:
    """A client process standing for many episode actors: PIPELINE completions in flight at once
    (as many episodes finish concurrently), each call one round trip (submit + next work item)
    for one completion, or for per_call of them (exchange_many)."""
    import ray

    items = ray.get([source.acquire.remote(name) for _ in range(PIPELINE)])
    # The window starts once this client holds its work: a feeding process that started late (a
    # Ray worker takes a second or more to start on a busy machine) still feeds for `seconds`.
    count, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        if per_call == 1:
            items = ray.get([source.exchange.remote(_finished(item), name) for item in items])
        else:
            calls = [source.exchange_many.remote([_finished(i) for i in items[k:k + per_call]], name)
                     for k in range(0, len(items), per_call)]
            items = [item for got in ray.get(calls) for item in got]
        count += len(items)
    return count


def scale(cfg: Config, repetitions: int) -> dict:
    from actors.fleet.launch import init_ray
    from envs.validate import trainable_tasks
    from actors.stages.policy_setup import ensure_policy

    init_ray(cfg)
    tokenizer_path, model_path = ensure_policy(cfg)
    tasks = trainable_tasks(cfg.tasks)[0]
    levels: list[dict] = []
    skipped: list[int] = []
    for n in LEVELS:
        if len(levels) >= 2 and _projected_mb(levels, n) > MEMORY_HEADROOM * available_mb():
            skipped.append(n)  # would not fit: the last level is as far as this machine goes
            continue
        levels.append(run_level(level_config(cfg, n), model_path, tokenizer_path, tasks))
    absorb = [collector_absorption() for _ in range(repetitions)]
    reached = max(concurrent(level) for level in levels)
    per_episode_mb = _per_episode_mb(levels)
    rate = statistics.median(a["via_ray_per_s"] for a in absorb)
    return {
        "figure": "concurrent episodes reached / 128 (the target; the reference run held 96 per node)",
        "ratio": reached / 128, "baseline": 128, "bound": None,
        "target": ">= 128 concurrent episodes on one node; collector >= 5000 completions/s",
        "met": reached >= 128 and rate >= 5000,
        "concurrent_episodes": reached, "memory_per_episode_mb": per_episode_mb,
        "memory_per_episode_by_kind": per_episode_by_kind(levels[0]),
        "memory_per_episode_by_level": {str(level["episodes"]): per_episode_by_kind(level) for level in levels
                                        if level["outcome"] == HELD},
        "episodes_per_24gb_projected": MACHINE_GB * 1024 / per_episode_mb,
        "collector_completions_per_s": rate,
        "collector_in_process_per_s": statistics.median(a["in_process_per_s"] for a in absorb),
        "ray_floor_per_s": statistics.median(a["ray_floor_per_s"] for a in absorb),
        "ray_floor_batched_per_s": statistics.median(a["ray_floor_batched_per_s"] for a in absorb),
        "reference_completions_per_s": REFERENCE_PER_S,
        "levels": levels, "levels_skipped_for_memory": skipped, "absorption_runs": absorb,
        "setup": {"levels_tried": LEVELS, "engine": "sim (1 engine, batch = episodes)", "sandbox": cfg.sandbox.backend,
                  "memory_total_mb": _meminfo_mb("MemTotal")},
    }


def per_episode_by_kind(level: dict) -> dict:
    """USS and PSS per episode (MB) of each kind an episode adds, at one level (empty when its
    processes were not read: the level did not hold, or Ray was not started by this process)."""
    n, by_kind = level["episodes"], level["memory_by_kind"]
    return {kind: {"processes_per_episode": by_kind[kind]["processes"] / n, "uss_mb": by_kind[kind]["uss_mb"] / n,
                   "pss_mb": by_kind[kind]["pss_mb"] / n, "anon_mb": by_kind[kind]["anon_mb"] / n}
            for kind in EPISODE_KINDS if kind in by_kind}


def _wait_for_memory_back(before_mb: float, timeout_s: float = 60.0) -> None:
    """Ended actors' processes exit asynchronously; the next level measures from a settled machine."""
    deadline = time.monotonic() + timeout_s
    while available_mb() < before_mb - 300 and time.monotonic() < deadline:
        time.sleep(0.5)


def _held(levels: list[dict]) -> list[dict]:
    """The levels that held all their episodes (all of them when none did: their figures are all there is)."""
    return [level for level in levels if level["outcome"] == HELD] or levels


def _projected_mb(levels: list[dict], n: int) -> float:
    """Memory a level of n episodes would take: the last level's plus the marginal cost of the rest."""
    last = _held(levels)[-1]
    return last["memory_used_mb"] + _per_episode_mb(levels) * (n - last["episodes"])


def _per_episode_mb(levels: list[dict]) -> float:
    """Marginal memory per episode between the first and last level that held all its episodes
    (one level: its average). A level that timed out or was ended early held fewer processes than
    its count: its memory would understate the cost."""
    held = _held(levels)
    low, high = held[0], held[-1]
    if high["episodes"] == low["episodes"]:
        return high["memory_used_mb"] / high["episodes"]
    return (high["memory_used_mb"] - low["memory_used_mb"]) / (high["episodes"] - low["episodes"])


def _meminfo_mb(field: str) -> float:
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields[field].split()[0]) / 1024
