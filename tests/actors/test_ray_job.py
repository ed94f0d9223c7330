"""The README's cluster path: `ray start --head` on loopback + `ray job submit -- python -m actors train`,
watched live (`swerve status`, Prometheus), its driver SIGKILLed and the job resubmitted with --resume."""
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from actors.training.sample_collector import COUNTERS
from bench.resilience.torture import RayHead, wait_until
from policies.training.checkpoint import latest_checkpoint, read_meta

pytestmark = pytest.mark.slow  # a Ray cluster and `ray job submit`

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
IDENTITY = COUNTERS[1:]  # everything admitted is in exactly one of these
# The first job is given more steps than it can reach while it is watched (its driver is killed
# first); the resumed job is given its newest checkpoint's step + MORE_STEPS.
FIRST_JOB_STEPS = 1000
MORE_STEPS = 2


def get_json(url: str, token: str):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=5) as reply:
        return json.loads(reply.read())


class Head:
    """The test's view of a head node (bench/resilience/torture.py's RayHead): its job API, by token."""

    def __init__(self, head: RayHead):
        self.dashboard, self.gcs, self.metrics_port = head.dashboard, head.gcs, head.metrics_port
        self.env, self.token = head.env, head.token

    def api(self, path: str):
        return get_json(f"{self.dashboard}{path}", self.token)

    def submit(self, submission_id: str, *train_args: str) -> None:
        cmd = [str(BIN / "ray"), "job", "submit", "--no-wait", "--submission-id", submission_id,
               "--address", self.dashboard, "--working-dir", str(REPO), "--",
               "python", "-m", "actors", "train", *train_args]
        for _ in range(30):
            job = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=300)
            # The dashboard answers a few seconds before the node's job agent is ready.
            if "No available agent" not in job.stderr + job.stdout:
                break
            time.sleep(2)
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]

    def job(self, submission_id: str) -> dict:
        return self.api(f"/api/jobs/{submission_id}")

    def wait_job(self, submission_id: str, timeout_s: float) -> dict:
        done = ("SUCCEEDED", "FAILED", "STOPPED")
        return wait_until(lambda: (j := self.job(submission_id))["status"] in done and j, timeout_s,
                          f"job {submission_id} to end")

    def logs(self, submission_id: str) -> str:
        return self.api(f"/api/jobs/{submission_id}/logs")["logs"]

    def sigkill_driver(self, submission_id: str) -> None:
        pid = self.job(submission_id)["driver_info"]["pid"]
        os.kill(int(pid), signal.SIGKILL)  # a child of the head we started: ours to end


@pytest.fixture(scope="module")
def ray_head():
    """A head node of our own, on loopback, ended by its process ids (never `ray stop`)."""
    with RayHead() as head:
        yield Head(head)


def common_args(tmp_path, swerve_cache, name):
    # The tests' small run (the embedded default's steps take a minute each on 2 cores): what is tested
    # is the cluster path, the job API and the resume, not the recipe.
    return ["--config", "tests/smoke.yaml", f"run.name={name}", f"run.dir={tmp_path}", f"model.cache_dir={swerve_cache}",
            f"tokenizer.cache_dir={swerve_cache}", "rollout.max_turns=3", "run.status_interval_s=1"]


def test_job_is_watched_live_and_resumes_after_its_driver_is_killed(ray_head, tmp_path, swerve_cache):
    """A job watched while it runs (`swerve status`, Prometheus), its driver SIGKILLed, and the job
    submitted again with --resume: it finishes from its newest checkpoint, nothing trained twice.
    (Three kills at random moments, one mid-save: tests/bench/resilience/test_torture.py, make check.)"""
    run = tmp_path / "live"
    args = [*common_args(tmp_path, swerve_cache, "live"), "trainer.checkpoint_interval=1"]
    job_id = f"swerve-live-{secrets.token_hex(3)}"
    ray_head.submit(job_id, *args, f"trainer.total_steps={FIRST_JOB_STEPS}")

    def live_status():
        out = subprocess.run([str(BIN / "swerve"), "status", "--address", ray_head.gcs, "--json", "run.name=live"],
                             env=ray_head.env, capture_output=True, text=True, timeout=120)
        return out.returncode == 0 and json.loads(out.stdout.strip().splitlines()[-1])

    # Each `swerve status` is a process that imports swerve and joins the cluster (seconds of CPU):
    # asked once the run has trained a step (and goes on), not every 2 s while the job starts.
    wait_until((run / "metrics.jsonl").is_file, 300, "the job's first step")
    status = wait_until(live_status, 180, "swerve status to attach", poll_s=2)
    assert status["accounting"]["identity_holds"] is True and status["engines"]

    def prometheus():
        with urllib.request.urlopen(f"http://127.0.0.1:{ray_head.metrics_port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        return [line for line in text.splitlines() if line.startswith("ray_swerve_admitted{") and 'run="live"' in line]

    assert wait_until(prometheus, 180, "ray_swerve_admitted on the Prometheus endpoint", poll_s=2)
    wait_until((run / "checkpoints" / "step-00000001").is_dir, 300, "checkpoint of step 1")
    assert ray_head.job(job_id)["status"] == "RUNNING", ray_head.logs(job_id)[-3000:]
    ray_head.sigkill_driver(job_id)
    assert ray_head.wait_job(job_id, 120)["status"] in ("FAILED", "STOPPED")

    # The driver is dead: its newest checkpoint is the one the resumed job must continue from.
    newest = read_meta(latest_checkpoint(str(run / "checkpoints")))["step"]
    steps = newest + MORE_STEPS
    again = f"swerve-live-resumed-{secrets.token_hex(3)}"
    ray_head.submit(again, *args, f"trainer.total_steps={steps}", "run.resume=true")
    job = ray_head.wait_job(again, 600)
    assert job["status"] == "SUCCEEDED", ray_head.logs(again)[-3000:]
    logs = ray_head.logs(again)  # the console: a progress line per stage; each step's status is in the run's log
    assert f"[swerve] live train: {steps}/{steps} steps" in logs and "[swerve] step 1/" not in logs
    assert f"[swerve] resumed at step {newest}," in logs
    run_log = (run / "logs" / "console.log").read_text()
    assert "[swerve] step 1/" in run_log and f"[swerve] step {steps}/{steps}" in run_log
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "resume", "done"] and events[1]["step"] == newest, events
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in rows] == list(range(1, steps + 1)) and all(r["staleness_max"] <= 1 for r in rows)
    accounting = json.loads((run / "accounting.json").read_text())
    assert accounting["admitted"] == sum(accounting[k] for k in IDENTITY)
    trained = []
    for f in (run / "trajectories").glob("*.jsonl"):
        trained += [(t["group_id"], t["member"], t["attempt"]) for t in map(json.loads, f.read_text().splitlines())]
    assert len(trained) == len(set(trained))
