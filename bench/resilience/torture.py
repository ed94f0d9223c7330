"""Restart torture: `swerve train` in a child process on a Ray head of our own, SIGKILLed three times
(at random moments, once in the middle of a checkpoint save) and resumed with --resume each time.

Used by tests/bench/resilience/test_torture.py and `swerve bench reliability`; returns what a caller
asserts or reports: kill points, the final books, versions, duplicates among trained samples.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from policies.training.checkpoint import EXTRA, PAUSE_ENV, latest_checkpoint, list_checkpoints, read_torch
from policies.engines.process import free_port

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def wait_until(predicate, timeout_s: float, what: str, poll_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    raise TimeoutError(f"{what} did not happen within {timeout_s} s")


class RayHead:
    """`ray start --head --block` with every port explicit (another Ray may hold the defaults) and a
    token of its own, in its own process group: ended by its own pid, then the group (never a `ray stop`)."""

    def __init__(self, num_cpus: int = 2):
        self.num_cpus = num_cpus

    def __enter__(self) -> "RayHead":
        port = free_port()
        ports = {flag: free_port() for flag in (
            "dashboard-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "metrics-export-port",
            "ray-client-server-port", "runtime-env-agent-port", "node-manager-port", "object-manager-port")}
        # A short path: Ray's socket names must fit in 107 bytes.
        self.ray_tmp = Path(f"/tmp/swt-{secrets.token_hex(3)}")
        self.gcs, self.metrics_port = f"127.0.0.1:{port}", ports["metrics-export-port"]
        # Ray 2.60 clusters require a token; this cluster gets its own, not the user's ~/.ray one.
        self.token = secrets.token_hex(32)
        self.env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "RAY_AUTH_MODE": "token",
                    "RAY_AUTH_TOKEN": self.token}
        self.proc = subprocess.Popen(
            [str(BIN / "ray"), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
             "--dashboard-host=127.0.0.1", f"--num-cpus={self.num_cpus}", f"--temp-dir={self.ray_tmp}",
             "--disable-usage-stats", *(f"--{k}={v}" for k, v in ports.items())],
            env=self.env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.dashboard = f"http://127.0.0.1:{ports['dashboard-port']}"
        try:
            wait_until(lambda: self._alive_actors("") is not None, 120, "the Ray head to answer", poll_s=1)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        # SIGTERM to `ray start` alone: it stops its own processes in ~2 s. Sent to the whole group,
        # each process takes its own graceful path and the head needs ~33 s. Whatever is left of the
        # group after that is killed.
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(ProcessLookupError):  # the group is already empty
            os.killpg(self.proc.pid, signal.SIGKILL)
        shutil.rmtree(self.ray_tmp, ignore_errors=True)

    def _alive_actors(self, namespace: str):
        """Names of the live actors in `namespace` (None while the head does not answer)."""
        # By the dashboard's address: other Ray instances may run on this machine.
        code = ("import json; from ray.util.state import list_actors; "
                "print(json.dumps([a['name'] for a in list_actors(address=%r, filters=[('state', '=', 'ALIVE'), "
                "('ray_namespace', '=', %r)], limit=10000)]))" % (self.dashboard, namespace))
        out = subprocess.run([sys.executable, "-c", code], env=self.env, capture_output=True, text=True, timeout=120)
        return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None

    def wait_namespace_empty(self, namespace: str, timeout_s: float = 120) -> None:
        """A SIGKILLed driver's actors die with it (they are owned by it); their names must be free again."""
        wait_until(lambda: self._alive_actors(namespace) == [], timeout_s, f"the actors of {namespace} to end",
                   poll_s=1)


class Driver:
    """One `swerve train` process in its own process group, so a SIGKILL leaves no child behind."""

    def __init__(self, head: RayHead, args: list, log: Path, pause_s: float = 0.0):
        env = {**head.env, "RAY_ADDRESS": head.gcs}
        if pause_s:
            env[PAUSE_ENV] = str(pause_s)
        self.log = log
        with log.open("w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "actors", "train", *args], cwd=REPO, env=env,
                                         start_new_session=True, stdout=out, stderr=subprocess.STDOUT)

    def sigkill(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the driver ended before its kill:\n{self.log.read_text()[-3000:]}")
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)


def steps_saved(run: Path) -> list[int]:
    return [step for step, _ in list_checkpoints(str(run / "checkpoints"))]


def in_flight_at_latest(run: Path) -> int:
    """How much work the newest complete checkpoint recorded as in flight: what a resume must re-admit."""
    extra = read_torch(str(Path(latest_checkpoint(str(run / "checkpoints"))) / EXTRA))
    return len(extra["collector"]["in_flight"])


def mid_save(run: Path, after_step: int):
    """The `.tmp-` directory of a save past `after_step` whose files are all written but not renamed."""
    root = run / "checkpoints"
    found = [p for p in root.glob(".tmp-step-*") if int(p.name.rsplit("-", 1)[1]) > after_step
             and (p / "meta.json").is_file()] if root.is_dir() else []
    return found[0] if found else None


def run_torture(work: Path, overrides: list[str], total_steps: int, seed: int, timeout_s: float = 600) -> dict:
    rng = random.Random(seed)
    name = "torture"
    run = work / name
    args = ["--config", str(REPO / "tests" / "smoke.yaml"), f"run.dir={work}", f"run.name={name}", f"trainer.total_steps={total_steps}",
            "trainer.checkpoint_interval=1", "run.status_interval_s=1", *overrides]
    kills = []
    with RayHead() as head:
        for round_index, point in enumerate(("random", "mid-save", "random")):
            before = max(steps_saved(run), default=0)
            log = work / f"driver-{round_index}.log"
            driver = Driver(head, [*args, *(["--resume"] if round_index else [])], log,
                            pause_s=2 * timeout_s if point == "mid-save" else 0.0)
            if point == "mid-save":
                tmp = wait_until(lambda: mid_save(run, before), timeout_s, "a checkpoint save in progress")
            else:
                wait_until(lambda: max(steps_saved(run), default=0) > before, timeout_s, "a new checkpoint")
                time.sleep(rng.uniform(0.0, 1.5))  # short: later rounds need steps left to kill
            driver.sigkill()
            head.wait_namespace_empty(f"swerve-{name}")
            kill = {"point": point, "latest_checkpoint": max(steps_saved(run)), "in_flight": in_flight_at_latest(run)}
            if point == "mid-save":
                kill["half_written_left"] = tmp.is_dir()
                kill["previous_checkpoint_kept"] = kill["latest_checkpoint"] == before
            kills.append(kill)
        final = Driver(head, [*args, "--resume"], work / "driver-final.log")
        code = final.proc.wait(timeout=timeout_s)
    final_log = final.log.read_text()
    if code != 0:
        raise RuntimeError(f"the final resumed run failed ({code}):\n{final_log[-4000:]}")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    accounting = json.loads((run / "accounting.json").read_text())
    trained = []
    for f in (run / "trajectories").glob("*.jsonl"):
        trained += [(t["group_id"], t["member"], t["attempt"]) for t in map(json.loads, f.read_text().splitlines())]
    # The run's own record of its life (events.jsonl), not its console's wording.
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]
    resumed = [{k: e[k] for k in ("step", "version", "readmitted")} for e in events if e["event"] == "resume"]
    return {"kills": kills, "resumed": resumed, "versions": [r["policy_version"] for r in rows],
            "accounting": accounting, "trained_samples": len(trained),
            "trained_twice": len(trained) - len(set(trained))}
