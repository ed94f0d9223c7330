"""The README's cluster path: `ray start --head` on loopback + `ray job submit -- python -m actors train`,
watched live (`swerve status`, Prometheus), and a job SIGKILLed twice and resumed twice."""
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from actors.sample_collector import COUNTERS
from bench.torture import wait_until
from policies.server.process import free_port

pytestmark = pytest.mark.slow  # a Ray cluster and `ray job submit`

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
IDENTITY = COUNTERS[1:]  # everything admitted is in exactly one of these


def get_json(url: str, token: str):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=5) as reply:
        return json.loads(reply.read())


class Head:
    def __init__(self, dashboard: str, gcs: str, metrics_port: int, env: dict, token: str):
        self.dashboard, self.gcs, self.metrics_port, self.env, self.token = dashboard, gcs, metrics_port, env, token

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
    """A head node of our own, in the foreground (--block), ended by its process group id."""
    port, dashboard_port = free_port(), free_port()
    # Every port explicit: the test session's own Ray already holds the defaults (e.g. 52365).
    ports = {flag: free_port() for flag in (
        "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "metrics-export-port",
        "ray-client-server-port", "runtime-env-agent-port", "node-manager-port", "object-manager-port")}
    temp_dir = tempfile.mkdtemp(prefix="swr-")
    # Ray 2.60 clusters require a token; this cluster gets its own, not the user's ~/.ray one.
    token = secrets.token_hex(32)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    head = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
         "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}", "--num-cpus=2",
         f"--temp-dir={temp_dir}", "--disable-usage-stats", *(f"--{k}={v}" for k, v in ports.items())],
        env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    dashboard = f"http://127.0.0.1:{dashboard_port}"
    try:
        wait_until(lambda: _answers(f"{dashboard}/api/version", token), 90, "the dashboard to answer")
        yield Head(dashboard, f"127.0.0.1:{port}", ports["metrics-export-port"], env, token)
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _answers(url: str, token: str) -> bool:
    try:
        get_json(url, token)
    except OSError:
        return False
    return True


def common_args(tmp_path, swerve_cache, name):
    return [f"run.name={name}", f"run.dir={tmp_path}", f"model.cache_dir={swerve_cache}",
            f"tokenizer.cache_dir={swerve_cache}", "rollout.max_turns=3", "run.status_interval_s=1"]


def test_job_runs_and_is_watched_live(ray_head, tmp_path, swerve_cache):
    job_id = f"swerve-live-{secrets.token_hex(3)}"
    ray_head.submit(job_id, *common_args(tmp_path, swerve_cache, "live"), "trainer.total_steps=3")

    def live_status():
        out = subprocess.run([str(BIN / "swerve"), "status", "--address", ray_head.gcs, "--json", "run.name=live"],
                             env=ray_head.env, capture_output=True, text=True, timeout=120)
        return out.returncode == 0 and json.loads(out.stdout.strip().splitlines()[-1])

    status = wait_until(live_status, 180, "swerve status to attach", poll_s=2)
    assert status["accounting"]["identity_holds"] is True and status["engines"]

    def prometheus():
        with urllib.request.urlopen(f"http://127.0.0.1:{ray_head.metrics_port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        return [line for line in text.splitlines() if line.startswith("ray_swerve_admitted{") and 'run="live"' in line]

    assert wait_until(prometheus, 180, "ray_swerve_admitted on the Prometheus endpoint", poll_s=2)
    job = ray_head.wait_job(job_id, 600)
    assert job["status"] == "SUCCEEDED", ray_head.logs(job_id)[-3000:]
    logs = ray_head.logs(job_id)  # the console: a progress line per stage; each step's status is in the run's log
    assert "[swerve] live train: 3/3 steps" in logs and "[swerve] step 1/3" not in logs
    run_log = (tmp_path / "live" / "logs" / "console.log").read_text()
    assert "[swerve] step 1/3" in run_log and "[swerve] step 3/3" in run_log
    rows = [json.loads(line) for line in (tmp_path / "live" / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in rows] == [1, 2, 3] and all(r["staleness_max"] <= 1 for r in rows)


def test_job_sigkilled_twice_resumes_twice(ray_head, tmp_path, swerve_cache):
    run = tmp_path / "torture"
    args = [*common_args(tmp_path, swerve_cache, "torture"), "trainer.total_steps=4", "trainer.checkpoint_interval=1"]
    for attempt, kill_after_step in enumerate((1, 2)):
        job_id = f"swerve-torture-{attempt}-{secrets.token_hex(3)}"
        ray_head.submit(job_id, *args, *(["run.resume=true"] if attempt else []))
        checkpoint = run / "checkpoints" / f"step-{kill_after_step:08d}"
        wait_until(checkpoint.is_dir, 300, f"checkpoint of step {kill_after_step}")
        ray_head.sigkill_driver(job_id)
        assert ray_head.wait_job(job_id, 120)["status"] in ("FAILED", "STOPPED")
    job_id = f"swerve-torture-final-{secrets.token_hex(3)}"
    ray_head.submit(job_id, *args, "run.resume=true")
    job = ray_head.wait_job(job_id, 600)
    assert job["status"] == "SUCCEEDED", ray_head.logs(job_id)[-3000:]
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    resumes = [e["step"] for e in events if e["event"] == "resume"]
    # A kill can land before its job resumed (when the checkpoint it waits for was already there), so
    # one or two resumes; the final job's is the last, from step 2 or later.
    assert [e["event"] for e in events] == ["start", *["resume"] * len(resumes), "done"] and len(resumes) >= 1
    assert resumes == sorted(resumes) and resumes[-1] >= 2 and events[-1]["step"] == 4, events
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in rows] == [1, 2, 3, 4]
    accounting = json.loads((run / "accounting.json").read_text())
    assert accounting["admitted"] == sum(accounting[k] for k in IDENTITY)
    trained = []
    for f in (run / "trajectories").glob("*.jsonl"):
        trained += [(t["group_id"], t["member"], t["attempt"]) for t in map(json.loads, f.read_text().splitlines())]
    assert len(trained) == len(set(trained))
