"""`swerve pipeline` end to end at the smallest size: every stage runs and the files appear."""
import json

import pytest

from actors.cli import main

pytestmark = pytest.mark.slow  # the whole pipeline on Ray


def test_pipeline_writes_summary_predictions_and_curve(ray_session, swerve_cache, tmp_path):
    code = main(["pipeline", f"run.dir={tmp_path}", "run.name=story", f"model.cache_dir={swerve_cache}",
                 f"tokenizer.cache_dir={swerve_cache}", "pipeline.trace_tasks=2", "pipeline.traces_per_task=1",
                 "sft.max_steps=2", "sft.batch_size=2", "trainer.total_steps=1", "engine.num_engines=1",
                 "eval.num_tasks=2", "eval.attempts=1", "rollout.max_turns=2", "rollout.max_tokens_per_turn=16"])
    assert code == 0
    root = tmp_path / "story"
    summary = json.loads((root / "summary.json").read_text())
    assert {"base_pass_at_1", "sft_pass_at_1", "rl_pass_at_1", "attempts_per_task", "eval_tasks"} <= set(summary)
    assert summary["eval_tasks"] == 2 and summary["attempts_per_task"] == 1
    for delta in ("sft_minus_base", "rl_minus_sft"):
        assert {"delta", "ci95_low", "ci95_high", "tasks", "better", "worse"} <= set(summary[delta])
        assert summary[delta]["ci95_low"] <= summary[delta]["delta"] <= summary[delta]["ci95_high"]
    assert set(summary["pass_at_1_ci95"]) == {"base", "sft", "rl"}
    # The RL stage trained on the training tasks without an expert trace.
    import yaml

    from envs.loaders import load_tasks

    train_ids = [t.id for t in load_tasks("builtin", "train", [])]
    rl_ids = yaml.safe_load((root / "rl" / "config.yaml").read_text())["tasks"]["ids"]
    assert rl_ids == train_ids[2:]
    for stage in ("base", "sft", "rl"):
        assert (root / stage / "eval.json").is_file()
    assert (root / "rl" / "policy" / "config.json").is_file()
    rows = [json.loads(line) for line in (root / "predictions.jsonl").read_text().splitlines()]
    assert rows and all({"instance_id", "model_name_or_path", "model_patch"} <= set(r) for r in rows)
    assert (root / "learning_curve.png").read_bytes().startswith(b"\x89PNG")


def test_rl_pool_is_the_tasks_sft_never_saw():
    import pytest

    from actors.pipeline import rl_task_ids

    assert rl_task_ids(["a", "b", "c"], ["a"], unseen_only=True) == ["b", "c"]
    assert rl_task_ids(["a", "b", "c"], ["a"], unseen_only=False) == ["a", "b", "c"]
    with pytest.raises(ValueError, match="pipeline.trace_tasks"):
        rl_task_ids(["a"], ["a"], unseen_only=True)


def test_summary_table_prints_intervals_and_paired_deltas():
    from actors.pipeline import summary_table

    summary = {"attempts_per_task": 4, "eval_tasks": 100, "stages": ["sft", "rl"],
               "sft_pass_at_1": 0.45, "rl_pass_at_1": 0.57,
               "pass_at_1_ci95": {"sft": [0.35, 0.55], "rl": [0.47, 0.66]},
               "pass_at_k": {"sft": {"4": 0.49}, "rl": {"4": 0.62}},
               "rl_minus_sft": {"delta": 0.12, "ci95_low": 0.06, "ci95_high": 0.18, "tasks": 100, "better": 20,
                                "worse": 4}}
    text = summary_table(summary)
    assert " 45.0% [ 35.0%,  55.0%]" in text and "rl - sft: +12.0 points [+6.0, +18.0]" in text
