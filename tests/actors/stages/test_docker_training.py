"""A short training run in real containers on the image tasks: the books balance, and a
container killed under an episode costs that episode (infra_error(sandbox), re-run), not the run."""
import json
import subprocess
import threading
import time

import pytest

from actors.stages.driver import train
from actors.training.sample_collector import COUNTERS
from configs import load_config
from envs import image_suite

IDS = ["textkit-001", "textkit-002", "textkit-003", "textkit-004"]


def _kill_running_leases(stop: threading.Event, killed: list) -> None:
    """Kill every lease container running at the first moment any is: they are starting or running
    episodes (a tiny model's episode can end within a second, so waiting could miss it). Under
    load, one container alone could be caught idle between its episode's end and its close, where
    a kill costs nothing: a CI run once saw no infra error that way."""
    while not stop.is_set() and not killed:
        listed = subprocess.run(["docker", "ps", "-q", "--filter", "label=swerve.owner",
                                 "--filter", "status=running"], capture_output=True, text=True).stdout.split()
        if listed and subprocess.run(["docker", "kill", *listed], capture_output=True).returncode in (0, 1):
            killed.extend(listed)  # 1: one of them ended by itself meanwhile; the rest were killed
        time.sleep(0.05)


def test_training_on_image_tasks_survives_a_killed_container(docker_image, ray_session, swerve_cache, tmp_path):
    tags = image_suite.build(IDS)
    cfg = load_config("configs/builtin_images.yaml", [
        *[f"{k}={v}" for k, v in {"run.dir": tmp_path, "run.name": "docker", "model.cache_dir": swerve_cache,
                                  "tokenizer.cache_dir": swerve_cache}.items()],
        f"tasks.ids=[{','.join(IDS)}]", "engine.backend=cpu", "engine.num_engines=1", "trainer.backend=torch",
        "trainer.total_steps=1", "rollout.num_episode_actors=4", "rollout.group_size=2", "rollout.groups_per_batch=2",
        "rollout.max_turns=3", "rollout.max_tokens_per_turn=24", "rollout.drop_uniform_groups=false",
        "ray.dashboard=false", "sandbox.pool_size=0"])  # every running container is an episode's
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_running_leases, args=(stop, killed), daemon=True)
    killer.start()
    try:
        path = train(cfg)
    finally:
        stop.set()
        killer.join()
        subprocess.run(["docker", "rmi", *tags], capture_output=True)
    assert killed, "no lease container was seen running"
    accounting = json.loads((path / "accounting.json").read_text())
    assert accounting["admitted"] == sum(accounting[k] for k in COUNTERS[1:])
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in rows] == [1]
    sandbox_errors = sum((r["infra_error_by_source"] or {}).get("sandbox", 0) for r in rows)
    assert sandbox_errors + accounting["infra_excluded"] >= 1, (rows[-1]["infra_error_by_source"], accounting)
