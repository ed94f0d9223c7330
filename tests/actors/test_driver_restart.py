"""Runs that stop and resume, other trainer backends, and SFT output as the starting policy."""
import pytest
import json

from actors.cli import main
from actors.driver import train
from actors.sample_collector import COUNTERS
from configs import load_config

pytestmark = pytest.mark.slow  # training runs, killed and resumed

IDENTITY = COUNTERS[1:]  # everything admitted is in exactly one of these


def small(tmp_path, swerve_cache, name, *extra):
    return load_config("tests/smoke.yaml", [
        f"run.dir={tmp_path}", f"run.name={name}", "engine.num_engines=1",
        f"model.cache_dir={swerve_cache}", f"tokenizer.cache_dir={swerve_cache}",
        "rollout.max_turns=2", "rollout.max_tokens_per_turn=16", *extra,
    ])


def rows(path):
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def test_resume_continues_versions_and_trains_nothing_twice(ray_session, swerve_cache, tmp_path):
    first = train(small(tmp_path, swerve_cache, "resume", "trainer.total_steps=2", "trainer.checkpoint_interval=1"))
    assert [r["policy_version"] for r in rows(first)] == [1, 2]
    assert (first / "checkpoints").is_dir() and (first / "reward.png").is_file()
    before = json.loads((first / "accounting.json").read_text())

    path = train(small(tmp_path, swerve_cache, "resume", "trainer.total_steps=4", "run.resume=true"))
    assert [r["policy_version"] for r in rows(path)] == [1, 2, 3, 4]
    after = json.loads((path / "accounting.json").read_text())
    assert after["admitted"] == sum(after[k] for k in IDENTITY)
    assert after["trained"] >= before["trained"] + 2 * 8 - after["dropped_stale"]
    # every (group, member, attempt) in the trained samples of both runs appears once
    seen = []
    for f in sorted((path / "trajectories").glob("*.jsonl")):
        seen += [(t["group_id"], t["member"], t["attempt"]) for t in map(json.loads, f.read_text().splitlines())]
    assert len(seen) == len(set(seen))


def test_megatron_backend_trains_through_the_same_loop(ray_session, swerve_cache, tmp_path):
    path = train(small(tmp_path, swerve_cache, "megatron", "trainer.total_steps=2", "trainer.backend=megatron"))
    got = rows(path)
    assert [r["policy_version"] for r in got] == [1, 2]
    assert all(r["engine_versions"] == [r["policy_version"]] for r in got)


def test_sft_output_is_the_starting_policy_of_train(ray_session, swerve_cache, tmp_path):
    traces = tmp_path / "traces.jsonl"
    with traces.open("w") as f:
        for i in range(8):
            f.write(json.dumps({"messages": [
                {"role": "system", "content": "You fix bugs."},
                {"role": "user", "content": f"add({i}, 1) returns {i}; it should return {i + 1}"},
                {"role": "assistant", "content": "```bash\nsed -i '2s/a - b/a + b/' calc.py\n```"},
                {"role": "user", "content": "exit code 0"},
                {"role": "assistant", "content": "```bash\nsubmit\n```"}], "resolved": True}) + "\n")
    out = tmp_path / "sft-model"
    code = main(["sft", "--data", str(traces), "--out", str(out), f"model.cache_dir={swerve_cache}",
                 f"tokenizer.cache_dir={swerve_cache}", "sft.max_steps=6", "sft.batch_size=4"])
    assert code == 0 and (out / "config.json").is_file()
    path = train(small(tmp_path, swerve_cache, "from-sft", "trainer.total_steps=1", f"model.path={out}",
                       f"tokenizer.path={out}"))
    assert rows(path)[0]["policy_version"] == 1
    assert f"path: {out}" in (path / "config.yaml").read_text()


def test_sync_mode_is_the_on_policy_baseline_on_the_same_code(ray_session, swerve_cache, tmp_path):
    path = train(small(tmp_path, swerve_cache, "sync", "trainer.total_steps=2", "rollout.mode=sync",
                       "rollout.max_staleness=3"))
    got = rows(path)
    assert [r["policy_version"] for r in got] == [1, 2]
    assert all(r["staleness_max"] == 0 for r in got)  # every trained token came from the version it trains
