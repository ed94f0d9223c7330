"""The README's cluster path: `ray start --head` on loopback + `ray job submit -- python -m actors train`."""
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, token: str):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=5) as reply:
        return json.loads(reply.read())


def wait_http(url: str, token: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            get_json(url, token)
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s")


@pytest.fixture
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
    address = f"http://127.0.0.1:{dashboard_port}"
    try:
        wait_http(f"{address}/api/version", token, timeout_s=90)
        yield address, env, token
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_ray_job_submit_runs_training(ray_head, tmp_path, swerve_cache):
    address, env, token = ray_head
    cmd = [str(BIN / "ray"), "job", "submit", "--address", address, "--working-dir", str(REPO), "--",
           "python", "-m", "actors", "train", "run.name=smoke", f"run.dir={tmp_path}", "trainer.total_steps=3",
           f"model.cache_dir={swerve_cache}", f"tokenizer.cache_dir={swerve_cache}", "rollout.max_turns=3"]
    for _ in range(30):
        job = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        # The dashboard answers a few seconds before the node's job agent is ready.
        if "No available agent" not in job.stderr + job.stdout:
            break
        time.sleep(2)
    assert job.returncode == 0, job.stdout[-4000:] + job.stderr[-4000:]
    assert "succeeded" in job.stdout
    rows = [json.loads(line) for line in (tmp_path / "smoke" / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in rows] == [1, 2, 3]
    assert all(r["staleness_max"] <= 1 for r in rows)
    accounting = json.loads((tmp_path / "smoke" / "accounting.json").read_text())
    assert accounting["identity_holds"] is True
    jobs = get_json(f"{address}/api/jobs/", token)
    assert any(j["status"] == "SUCCEEDED" for j in jobs)
