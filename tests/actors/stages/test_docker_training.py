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


# In the lease's own /tmp (a tmpfs): made by the run's setup and by the test, never by anything else.
WAITING, GATE = "/tmp/swerve-test-waiting", "/tmp/swerve-test-gate"


def _gated(trainable_tasks):
    """Each task's setup marks its lease as waiting and waits for the gate: a lease of this run can
    be caught mid-start, so a kill always lands inside an episode (a tiny model's episode is mostly
    format errors: it touches its sandbox at its start and at its end, when its change is read
    back, and a kill after that costs nothing)."""
    def gated(cfg_tasks):
        tasks, skipped = trainable_tasks(cfg_tasks)
        wait = f"touch {WAITING}; until [ -e {GATE} ]; do sleep 0.1; done; rm -f {WAITING}"
        return [dataclasses.replace(task, setup=(*task.setup, wait)) for task in tasks], skipped
    return gated


def _docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True)


def _kill_one_then_open_gates(stop: threading.Event, killed: list, unmarked: set) -> None:
    """Kill the first lease of this run seen waiting at its gate, then open the gate of every lease
    after it, until the run ends. A running container not waiting at a gate is left alone: this
    run's before or after its gate, or another's (a CI run once met two that were not this run's)."""
    opened = set()
    while not stop.is_set():
        for container in set(_docker("ps", "-q", "--filter", "label=swerve.owner", "--filter",
                                     "status=running").stdout.split()) - opened - set(killed):
            if _docker("exec", container, "test", "-e", WAITING).returncode != 0:
                unmarked.add(container)  # looked at again next time
            elif not killed and _docker("kill", container).returncode == 0:
                killed.append(container)
            elif killed and _docker("exec", container, "touch", GATE).returncode == 0:
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
    stop, killed, seen = threading.Event(), [], set()
    killer = threading.Thread(target=_kill_one_then_open_gates, args=(stop, killed, seen), daemon=True)
    killer.start()
    try:
        path = driver.train(cfg)
    finally:
        stop.set()
        killer.join()
        subprocess.run(["docker", "rmi", *tags], capture_output=True)
    assert killed, f"no lease of this run was seen at its gate (lease containers seen elsewhere: {seen})"
    accounting = json.loads((path / "accounting.json").read_text())
    assert accounting["admitted"] == sum(accounting[k] for k in COUNTERS[1:])
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in rows] == [1]
    # The killed lease was an episode's, mid-start: an infra error, not scored.
    assert accounting["infra_excluded"] >= 1, (killed, accounting)
