"""The whole asynchronous loop on a real local Ray: engines, trainer shards, episodes, sandboxes.
Injected faults (every kind in one run) are the reliability bench's fault run: tests/bench/resilience/test_reliability.py."""
import json

import pytest

from actors.stages.driver import train
from actors.training.sample_collector import COUNTERS
from configs import load_config

pytestmark = pytest.mark.slow  # training runs on local Ray

IDENTITY = COUNTERS[1:]  # everything admitted is in exactly one of these


@pytest.fixture(scope="module")
def e2e_run(ray_session, swerve_cache, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs")
    cfg = load_config("tests/smoke.yaml", ["run.loggers=[jsonl,tensorboard,wandb]",
        f"run.dir={run_dir}", "run.name=e2e", "trainer.total_steps=3", "trainer.num_shards=2",
        "engine.num_engines=2", "rollout.num_episode_actors=4", "rollout.max_staleness=1",
        f"model.cache_dir={swerve_cache}", f"tokenizer.cache_dir={swerve_cache}",
        "rollout.max_turns=3", "rollout.max_tokens_per_turn=32", "trainer.lr=0.001",
    ])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "offline")
        path = train(cfg)
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    accounting = json.loads((path / "accounting.json").read_text())
    return cfg, path, rows, accounting


def test_tensorboard_and_wandb_get_every_step_metric(e2e_run):
    import glob

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from actors.report.loggers import scalars
    from tests.actors.report.test_loggers import finished_records

    _, path, rows, _ = e2e_run
    events = EventAccumulator(str(path / "tensorboard"))
    events.Reload()
    numeric_every_step = set.intersection(*(set(scalars(r)) for r in rows))
    assert len(numeric_every_step) > 40
    for key in numeric_every_step:
        assert [e.step for e in events.Scalars(key)] == [1, 2, 3], key
    assert [e.value for e in events.Scalars("reward_mean")] == pytest.approx([r["reward_mean"] for r in rows])
    (wandb_file,) = glob.glob(str(path / "wandb" / "offline-run-*" / "run-*.wandb"))
    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
               for r in finished_records(wandb_file) if r.WhichOneof("record_type") == "history"]
    assert [h["_step"] for h in history] == [1, 2, 3]
    assert [h["policy_version"] for h in history] == [r["policy_version"] for r in rows]


def test_versions_increase_one_per_step(e2e_run):
    _, _, rows, _ = e2e_run
    assert [r["policy_version"] for r in rows] == [1, 2, 3]
    assert all(r["trainer_versions"] == [r["policy_version"]] * 2 for r in rows)


def test_no_trained_trajectory_is_too_stale(e2e_run):
    cfg, path, rows, _ = e2e_run
    assert all(r["staleness_max"] <= cfg.rollout.max_staleness for r in rows)
    for step_file in sorted((path / "trajectories").glob("step_*.jsonl")):
        step = int(step_file.stem.split("_")[1])
        for line in step_file.read_text().splitlines():
            traj = json.loads(line)
            # trained at version step-1; every generated token at most max_staleness behind it
            assert traj["versions"] and min(traj["versions"]) >= step - 1 - cfg.rollout.max_staleness


def test_accounting_identity_holds_every_step_and_at_the_end(e2e_run):
    _, _, rows, accounting = e2e_run
    for r in rows:
        assert r["admitted"] == sum(r[k] for k in IDENTITY)
    assert accounting["admitted"] == sum(accounting[k] for k in IDENTITY)
    assert accounting["identity_holds"] is True
    assert accounting["trained"] >= 3 * 8 - rows[-1]["dropped_stale"]


def test_every_engine_serves_latest_version_after_sync(e2e_run):
    _, _, rows, _ = e2e_run
    for r in rows:
        assert r["engine_versions"] == [r["policy_version"]] * 2


def test_metrics_carry_every_contract_name(e2e_run):
    from actors.report.run_dir import METRIC_NAMES

    _, path, rows, _ = e2e_run
    for r in rows:
        assert set(METRIC_NAMES) <= set(r)
        assert r["time_weight_sync_s"] > 0 and r["time_actor_update_s"] > 0
        assert r["sandbox_start_p50_s"] is not None and r["tokens_mean"] > 0
    assert (path / "config.yaml").read_text().count("max_staleness: 1") == 1


def test_actors_are_named_and_gone_after_the_run(e2e_run, ray_session):
    import time

    import ray

    def alive(name):
        try:
            ray.get_actor(name, namespace="swerve-e2e")
        except ValueError:
            return False
        return True

    names = ("engine-0", "engine-1", "trainer-0", "trainer-1", "collector", "episode-3", "sandbox-3")
    deadline = time.monotonic() + 30  # ray.kill and owner fate-sharing are asynchronous
    while any(alive(n) for n in names) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [n for n in names if alive(n)] == []


def test_any_gym_text_env_trains_by_changing_only_env_id(ray_session, swerve_cache, tmp_path):
    from envs.tasks.loaders import load_tasks

    # Also: training skips what the sanity gate quarantined, and says so.
    ids = [t.id for t in load_tasks("builtin", "train")]
    quarantine = tmp_path / "quarantine.json"
    quarantine.write_text(json.dumps({"source": "builtin", "tasks": {i: "gold patch fails" for i in ids[2:]}}))
    cfg = load_config("tests/smoke.yaml", [
        f"tasks.quarantine_file={quarantine}",
        f"run.dir={tmp_path}", "run.name=reverse", "trainer.total_steps=2", "engine.num_engines=1",
        f"model.cache_dir={swerve_cache}", f"tokenizer.cache_dir={swerve_cache}",
        "env.id=swerve/Reverse-v0",
    ])
    path = train(cfg)
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in rows] == [1, 2]
    trajs = [json.loads(line) for f in (path / "trajectories").glob("*.jsonl") for line in f.read_text().splitlines()]
    assert trajs and all(t["messages"][1]["content"].startswith("Reverse the word") for t in trajs)
    assert all(r["sandbox_start_p50_s"] is None for r in rows)  # this env starts no sandbox
    assert {t["task_id"] for t in trajs} <= set(ids[:2])
    accounting = json.loads((path / "accounting.json").read_text())
    assert sorted(accounting["tasks_skipped_quarantined"]) == sorted(ids[2:])
