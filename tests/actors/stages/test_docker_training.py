"""A short training run in real containers on the image tasks: the books balance, and a
container killed under an episode costs that episode (infra_error(sandbox), re-run), not the run."""
import dataclasses
import json
import subprocess
import threading
import time

from actors.stages import driver
from actors.training.sample_collector import COUNTERS
from configs import load_config
from envs import image_suite

IDS = ["textkit-001", "textkit-002", "textkit-003", "textkit-004"]


GATE = "/tmp/swerve-test-gate"  # in the lease's own /tmp (a tmpfs): made by the test, never by the run


def _gated(trainable_tasks):
    """Each task's setup waits for the gate: a lease is seen running while its start is still under
    way, so a kill always lands inside an episode (a tiny model's episode is mostly format errors,
    which touch the sandbox no more after its start: a kill after it would cost nothing)."""
    def gated(cfg_tasks):
        tasks, skipped = trainable_tasks(cfg_tasks)
        wait = f"until [ -e {GATE} ]; do sleep 0.1; done"
        return [dataclasses.replace(task, setup=(*task.setup, wait)) for task in tasks], skipped
    return gated


def _kill_then_open_gates(stop: threading.Event, killed: list) -> None:
    """Kill every lease running when the first one is seen (all wait at their gates), then open the
    gate of each lease that comes after, until the run ends."""
    opened = set()
    while not stop.is_set():
        listed = subprocess.run(["docker", "ps", "-q", "--filter", "label=swerve.owner",
                                 "--filter", "status=running"], capture_output=True, text=True).stdout.split()
        if listed and not killed:
            subprocess.run(["docker", "kill", *listed], capture_output=True)
            killed.extend(listed)
        for container in set(listed) - opened - set(killed):
            if subprocess.run(["docker", "exec", container, "touch", GATE], capture_output=True).returncode == 0:
                opened.add(container)
        time.sleep(0.1)


def test_training_on_image_tasks_survives_a_killed_container(docker_image, ray_session, swerve_cache, tmp_path,
                                                             monkeypatch):
    monkeypatch.setattr(driver, "trainable_tasks", _gated(driver.trainable_tasks))
    tags = image_suite.build(IDS)
    cfg = load_config("configs/builtin_images.yaml", [
        *[f"{k}={v}" for k, v in {"run.dir": tmp_path, "run.name": "docker", "model.cache_dir": swerve_cache,
                                  "tokenizer.cache_dir": swerve_cache}.items()],
        f"tasks.ids=[{','.join(IDS)}]", "engine.backend=cpu", "engine.num_engines=1", "trainer.backend=torch",
        "trainer.total_steps=1", "rollout.num_episode_actors=4", "rollout.group_size=2", "rollout.groups_per_batch=2",
        "rollout.max_turns=3", "rollout.max_tokens_per_turn=24", "rollout.drop_uniform_groups=false",
        "ray.dashboard=false", "sandbox.pool_size=0"])  # every running container is an episode's
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_then_open_gates, args=(stop, killed), daemon=True)
    killer.start()
    try:
        path = driver.train(cfg)
    finally:
        stop.set()
        killer.join()
        subprocess.run(["docker", "rmi", *tags], capture_output=True)
    assert killed, "no lease container was seen running"
    accounting = json.loads((path / "accounting.json").read_text())
    assert accounting["admitted"] == sum(accounting[k] for k in COUNTERS[1:])
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in rows] == [1]
    # Each killed lease was an episode's, mid-start: one infra error each, none scored.
    assert accounting["infra_excluded"] >= len(killed), (killed, accounting)
