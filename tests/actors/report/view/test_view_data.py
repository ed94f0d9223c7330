"""The view's data: a run directory read into steps, trajectories with their generated tokens as
text, groups and each eval task under every stage; secrets blanked even across tokens."""
import json

import pytest

from actors.report.view.run_data import TASKS_PER_CHUNK, page_data, stage_dirs
from actors.report.view.tokens import ReplyPieces, token_pieces
from policies.tokenizer import load_tokenizer
from tests.actors.report.view.run_fixture import REPLY, write_run

STAGES = ("base", "sft", "rl")


def test_each_token_s_piece_joins_back_to_the_reply_even_inside_a_character(tokenizer_path):
    tok = load_tokenizer(tokenizer_path)
    for text in (REPLY, "naïve → café ✓ 日本", "x"):
        ids = tok.encode(text)
        pieces = token_pieces(tok, ids)
        assert len(pieces) == len(ids) and "".join(pieces) == tok.decode(ids)


def test_steps_trajectories_and_eval_tasks_are_read_from_the_run(tmp_path, tokenizer_path):
    data = page_data(write_run(tmp_path / "run", tokenizer_path), STAGES, ReplyPieces())
    assert data.index["stages"] == ["sft", "rl"]  # no base stage in this run
    step, = data.index["steps"]
    assert (step["stage"], step["step"], step["trajectories"], step["trained"]) == ("rl", 1, 2, 2)
    assert step["outcomes"] == {"resolved": 1, "unresolved": 1} and step["metrics"]["reward_mean"] == 0.5
    first, second = data.chunks[step["chunk"]]
    tokens = first["tokens"]
    assert "".join(tokens["text"][:tokens["replies"][0]]) == REPLY and "".join(tokens["text"]).endswith("submit")
    assert (first["advantage"], first["staleness"], second["advantage"]) == (0.5, 1, -0.5)
    tasks = {t["task_id"]: t for t in data.index["eval"]["tasks"]}
    assert tasks["micro-eval-000"]["change"] == "worse" and tasks["micro-eval-001"]["change"] == "better"
    assert tasks["micro-eval-000"]["stages"]["sft"] == {"resolved": 1, "scored": 1, "outcomes": ["resolved"], "pass": 1.0}
    attempts = data.chunks[tasks["micro-eval-001"]["chunk"]]["micro-eval-001"]
    assert [a["messages"][0]["content"] for a in (attempts["sft"][0], attempts["rl"][0])] == \
        ["sft tried micro-eval-001", "rl tried micro-eval-001"]


def test_a_secret_the_policy_typed_is_blanked_in_the_token_pieces(tmp_path, tokenizer_path, monkeypatch):
    secret = "qv7Rt2Lx9pZw4Nk8"
    monkeypatch.setenv("SWERVE_VIEW_TEST_TOKEN", secret)
    data = page_data(write_run(tmp_path / "run", tokenizer_path, secret=secret), STAGES, ReplyPieces())
    rows = data.chunks[data.index["steps"][0]["chunk"]]
    text = "".join(rows[0]["tokens"]["text"])
    assert secret not in text and "[REDACTED]" in text and len(rows[0]["tokens"]["text"]) == len(rows[0]["tokens"]["ids"])


def test_without_the_run_s_tokenizer_the_tokens_show_as_ids(tmp_path, tokenizer_path):
    import shutil

    root = write_run(tmp_path / "run", tokenizer_path)
    shutil.rmtree(root / "rl" / "policy")
    rows = page_data(root, STAGES, ReplyPieces()).chunks["step-rl-1"]
    assert rows[0]["tokens"]["text"][0] == f"<{rows[0]['tokens']['ids'][0]}>"


def test_a_training_run_s_folder_is_one_stage_and_a_folder_without_a_run_names_what_to_pass(tmp_path, tokenizer_path):
    root = write_run(tmp_path / "run", tokenizer_path)
    assert stage_dirs(root / "rl", STAGES) == [("rl", root / "rl")]
    with pytest.raises(FileNotFoundError, match="swerve pipeline"):
        stage_dirs(tmp_path, STAGES)


def test_eval_transcripts_come_in_chunks_of_tasks(tmp_path):
    root = tmp_path / "run"
    (root / "sft").mkdir(parents=True)
    tasks = [f"t{i:03d}" for i in range(TASKS_PER_CHUNK + 3)]
    (root / "sft" / "eval.json").write_text(json.dumps({"per_task": [
        {"task_id": t, "n": 1, "resolved": 1, "outcomes": ["resolved"]} for t in tasks]}))
    data = page_data(root, STAGES, ReplyPieces())
    assert [t["chunk"] for t in data.index["eval"]["tasks"]].count("attempts-1") == 3
    assert data.index["eval"]["tasks"][0]["change"] is None  # one stage: nothing to compare
