"""`swerve bench profile`: where the RL step's time goes, step by step, beside its arithmetic floor.

It runs the RL stage of the config (from its SFT policy: `model.path=DIR`, else the one a finished
`make run` left in runs/<run.name>/sft, else it makes one with the pipeline's base and SFT stages
under runs/profile) while, in this process,
- a sampler reads every process of the run each PROFILE_INTERVAL_S (bench/throughput/process_cpu.py)
  and cuts the CPU-seconds by kind at each step's end (a new row in the run's metrics.jsonl);
- during the second step, py-spy samples one process of each kind; its stacks give the share of
  that kind's CPU by kind of work (bench/throughput/flame.py) and a flame graph, saved beside the
  result in bench/results/profile/<kind>.svg (with the collapsed stacks, <kind>.txt).
The first step (fleet start, imports, first weights) and the second (py-spy's own cost: it took
a third of the CPU when it ran through every step) are reported apart from the steady steps.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

from bench.throughput.flame import flame_svg, read_collapsed, shares
from bench.throughput.process_cpu import ProcessSampler, cores, machine_busy_s
from bench.throughput.profile_floor import model_flops_per_core_s, model_params, step_floor
from configs import Config

PROFILE_INTERVAL_S = 0.5
PY_SPY_RATE_HZ = 25
OUT_DIR = Path("bench/results/profile")
SANDBOX_COMMANDS = "commands of sandbox actors"


def sft_policy(cfg: Config) -> tuple[Config, str, list[str]]:
    """(config of the profile run, SFT policy, task ids SFT traced)."""
    from actors.stages.pipeline import run_pipeline
    from actors.stages.stage_cache import MARKER

    if cfg.model.path:
        return cfg, cfg.model.path, []
    done = cfg.run.path / "sft" / MARKER
    if not done.is_file():
        cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, name="profile"),
                                  pipeline=dataclasses.replace(cfg.pipeline, stages=["base", "sft"]))
        run_pipeline(cfg)
        done = cfg.run.path / "sft" / MARKER
    marker = json.loads(done.read_text())
    return cfg, str(cfg.run.path / marker["outputs"]["policy"]), marker.get("traced_task_ids", [])


class StepClock(threading.Thread):
    """Samples the run's processes and cuts their CPU-seconds at every new metrics row."""

    def __init__(self, metrics_path: Path, root_pid: int):
        super().__init__(daemon=True, name="profile-clock")
        self.metrics_path, self.sampler = metrics_path, ProcessSampler(root_pid)
        self.cuts: List[dict] = []
        self.stopping = threading.Event()
        self.rows = [threading.Event(), threading.Event()]  # the first and the second step done

    def run(self) -> None:
        self._cut(0)
        while not self.stopping.wait(PROFILE_INTERVAL_S):
            rows = _rows(self.metrics_path)
            if len(rows) > len(self.cuts) - 1:
                self._cut(len(rows))
                for event in self.rows[: len(rows)]:
                    event.set()
            else:
                self.sampler.sample()  # keeps the books of processes that end between cuts

    def _cut(self, step: int) -> None:
        self.cuts.append({"step": step, "t": time.monotonic(), "busy_s": machine_busy_s(),
                          "cpu": self.sampler.sample()})


def _rows(path: Path) -> List[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip().endswith("}")]


def py_spy_path() -> str:
    """py-spy beside this interpreter (a venv's bin/, which need not be on PATH), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.is_file() else shutil.which("py-spy")
    if found is None:
        raise RuntimeError("py-spy is not installed: `pip install py-spy` (make setup installs it with the dev extras)")
    return found


def start_py_spy(py_spy: str, pids_by_kind: Dict[str, List[int]], out_dir: Path) -> Dict[str, subprocess.Popen]:
    """One py-spy per kind of long-lived process, on its first process."""
    out_dir.mkdir(parents=True, exist_ok=True)
    spies = {}
    for kind, pids in sorted(pids_by_kind.items()):
        if kind.startswith("commands of ") or kind == "profiler":
            continue  # short-lived, or ourselves
        spies[kind] = subprocess.Popen(
            [py_spy, "record", "--pid", str(min(pids)), "--rate", str(PY_SPY_RATE_HZ), "--format", "raw",
             "--nonblocking", "-o", str(out_dir / f"{_slug(kind)}.txt")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return spies


def stop_py_spy(spies: Dict[str, subprocess.Popen], out_dir: Path) -> Dict[str, Dict[str, float]]:
    """Stops each py-spy (it writes its stacks on SIGINT); each kind's shares by kind of work."""
    for spy in spies.values():
        spy.send_signal(signal.SIGINT)
    result = {}
    for kind, spy in spies.items():
        spy.wait(timeout=60)
        path = out_dir / f"{_slug(kind)}.txt"
        if path.is_file():
            stacks = read_collapsed(path.read_text())
            (out_dir / f"{_slug(kind)}.svg").write_text(flame_svg(stacks, f"{kind}, RL step 2"))
            result[kind] = shares(stacks)
    return result


def _slug(kind: str) -> str:
    return kind.replace(" ", "_")


def step_table(cuts: List[dict], rows: List[dict]) -> List[dict]:
    """Per step: wall seconds, CPU-seconds by kind, the machine's idle core-seconds."""
    steps = []
    for before, after, row in zip(cuts, cuts[1:], rows):
        wall = after["t"] - before["t"]
        cpu = {k: after["cpu"].get(k, 0.0) - before["cpu"].get(k, 0.0) for k in after["cpu"]}
        busy = after["busy_s"] - before["busy_s"]
        steps.append({"step": row["step"], "wall_s": wall, "cpu_s": cpu, "run_cpu_s": sum(cpu.values()),
                      "machine_busy_s": busy, "idle_core_s": max(0.0, cores() * wall - busy),
                      **{k: row[k] for k in ("time_rollout_wait_s", "time_actor_update_s", "time_logprob_s",
                                             "time_weight_sync_s", "tokens_trained", "tokens_generated_trained",
                                             "tokens_generated_finished", "filtered_uniform", "trained")}})
    return steps


def profile(cfg: Config, repetitions: int, out_dir: Path = OUT_DIR) -> dict:
    """repetitions: unused (one profiled RL stage is its own repetition over its steps); out_dir:
    where the flame graphs and collapsed stacks go."""
    import os

    from actors.stages.driver import train
    from actors.stages.pipeline import rl_cfg, rl_task_ids
    from envs.tasks.loaders import load_tasks

    py_spy = py_spy_path()  # before any work: a missing profiler fails here, not after the run
    cfg, policy, traced = sft_policy(cfg)
    train_ids = [t.id for t in load_tasks(cfg.tasks.source, cfg.tasks.split, cfg.tasks.ids)]
    run_cfg = rl_cfg(dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, name="profile")), policy,
                     rl_task_ids(train_ids, traced, cfg.pipeline.rl_tasks), cfg.trainer.total_steps, resume=False)
    run_path = run_cfg.run.path
    if run_path.exists():
        shutil.rmtree(run_path)
    clock = StepClock(run_path / "metrics.jsonl", os.getpid())
    spies: Dict[str, subprocess.Popen] = {}

    failed: List[BaseException] = []  # a profiler that could not start fails the bench after the run

    work_shares: Dict[str, Dict[str, float]] = {}

    def spy_on_step_two() -> None:  # py-spy costs CPU: the steps after it are the clean ones
        clock.rows[0].wait()
        if clock.stopping.is_set():
            return
        try:
            spies.update(start_py_spy(py_spy, clock.sampler.pids_by_kind(), out_dir))
            clock.rows[1].wait()
            work_shares.update(stop_py_spy(spies, out_dir))
        except BaseException as err:  # re-raised in this bench's thread below
            failed.append(err)

    watcher = threading.Thread(target=spy_on_step_two, daemon=True)
    clock.start()
    watcher.start()
    try:
        train(run_cfg)
    finally:
        clock.stopping.set()
        for event in clock.rows:
            event.set()
        clock.join()
        watcher.join()
    if failed:
        raise RuntimeError("py-spy could not start on the run's processes") from failed[0]
    return summarize(clock.cuts, _rows(run_path / "metrics.jsonl"), work_shares, policy)


def summarize(cuts: List[dict], rows: List[dict], work_shares: Dict[str, Dict[str, float]], policy: str) -> dict:
    steps = step_table(cuts, rows)
    # Step 1 starts the fleet and step 2 carries py-spy's cost: the steady steps are the rest.
    steady = steps[2:] or steps[1:] or steps
    params, rate = model_params(policy), model_flops_per_core_s(policy)
    for s in steps:
        trained_share = s["tokens_generated_trained"] / max(1, s["tokens_generated_finished"])
        s.update(step_floor(s, params, rate, s["cpu_s"].get(SANDBOX_COMMANDS, 0.0) * trained_share, cores()))
    wall = statistics.median(s["wall_s"] for s in steady)
    floor = statistics.median(s["floor_wall_s"] for s in steady)
    kinds = sorted({k for s in steady for k in s["cpu_s"]}, key=lambda k: -sum(s["cpu_s"].get(k, 0) for s in steady))
    per_kind = {k: statistics.fmean(s["cpu_s"].get(k, 0.0) for s in steady) for k in kinds}
    ratio = wall / floor if floor else None
    return {
        "figure": "RL step wall / its arithmetic floor (median of the steady steps)", "baseline": floor,
        "ratio": ratio, "bound": None, "target": "<= 2x the floor", "met": ratio is not None and ratio <= 2.0,
        "step_wall_s": wall, "floor_wall_s": floor, "params": params, "flops_per_core_s": rate,
        "idle_core_s_mean": statistics.fmean(s["idle_core_s"] for s in steady),
        "dropped_generated_share": 1 - sum(s["tokens_generated_trained"] for s in steady) /
        max(1, sum(s["tokens_generated_finished"] for s in steady)),
        "cpu_s_by_kind_mean": per_kind, "work_shares": work_shares, "steps": steps,
        "table": profile_table(per_kind, work_shares, steady, wall, floor),
    }


def profile_table(per_kind: Dict[str, float], work_shares: Dict[str, Dict[str, float]], steady: List[dict],
                  wall_s: float, floor_s: float) -> List[str]:
    """The markdown table BENCHMARKS.md shows: CPU-seconds per steady step by process kind and, where
    py-spy sampled that kind, by kind of work; then the idle and the floor."""
    lines = ["| process kind | work (py-spy share of the kind's samples) | CPU-s per step |", "|---|---|---|"]
    for kind, cpu_s in per_kind.items():
        split = work_shares.get(kind, {})
        detail = ", ".join(f"{work} {share:.0%}" for work, share in split.items() if share >= 0.02) or "-"
        lines.append(f"| {kind} | {detail} | {cpu_s:.1f} |")
    idle = statistics.fmean(s["idle_core_s"] for s in steady)
    floor_cpu = statistics.fmean(s["floor_cpu_s"] for s in steady)
    generated = statistics.fmean(s["tokens_generated_finished"] for s in steady)
    dropped = 1 - sum(s["tokens_generated_trained"] for s in steady) / max(1, sum(s["tokens_generated_finished"]
                                                                             for s in steady))
    lines += [f"| idle (core-seconds) | - | {idle:.1f} |",
              f"| generated tokens | {dropped:.0%} of them in groups dropped or not trained | {generated:.0f} |",
              f"| **step wall** | median of {len(steady)} steady steps | **{wall_s:.1f} s** |",
              f"| **floor** | tokens x 8 FLOP/param at the model's measured rate + the trained episodes' "
              f"commands and tests; {floor_cpu:.1f} CPU-s | **{floor_s:.1f} s** |"]
    return lines
