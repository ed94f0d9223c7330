"""`swerve sft` from the command line: traces in, an HF model directory out that `model.path` takes
(the pipeline's sft stage feeds RL the same way: tests/actors/stages/test_pipeline.py)."""
import json

import pytest

from actors.cli.main import main


@pytest.mark.slow  # trains the run-sized tiny model
def test_swerve_sft_writes_a_model_directory_that_model_path_loads(swerve_cache, tmp_path, capsys):
    from policies.model import load_model

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
    assert main(["sft", "--data", str(traces), "--out", str(out), f"model.cache_dir={swerve_cache}",
                 f"tokenizer.cache_dir={swerve_cache}", "sft.max_steps=4", "sft.batch_size=4"]) == 0
    assert f"[swerve] sft done: {out} (use model.path={out})" in capsys.readouterr().out
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    assert load_model(str(out)).config.vocab_size > 0


def test_sft_without_data_or_out_exits_2_naming_both_keys(tmp_path, capsys):
    assert main(["sft", "--out", str(tmp_path / "x")]) == 2  # a config error's status
    assert "sft needs --data FILE (sft.data) and --out DIR (sft.out_dir)" in capsys.readouterr().err
