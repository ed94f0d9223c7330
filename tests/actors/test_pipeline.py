"""`swerve pipeline` end to end at the smallest size: every stage runs and the files appear."""
import json

from actors.cli import main


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
    for stage in ("base", "sft", "rl"):
        assert (root / stage / "eval.json").is_file()
    assert (root / "rl" / "policy" / "config.json").is_file()
    rows = [json.loads(line) for line in (root / "predictions.jsonl").read_text().splitlines()]
    assert rows and all({"instance_id", "model_name_or_path", "model_patch"} <= set(r) for r in rows)
    assert (root / "learning_curve.png").read_bytes().startswith(b"\x89PNG")
