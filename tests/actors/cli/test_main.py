"""`swerve` from the command line: `swerve sft` writes an HF model directory that `model.path` takes
(the pipeline's sft stage feeds RL the same way: tests/actors/stages/test_pipeline.py)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.cli.main import main

REPO = Path(__file__).resolve().parents[3]


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


SESSION_WITH_RAY = """
import sys
from pathlib import Path

import ray

from actors.cli.main import command_session
from actors.report import console

with command_session(Path(sys.argv[1]), verbose=False):
    ray.init(address="local", num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1")

    @ray.remote(num_cpus=0)
    class Worker:
        def shout(self):
            print("the same notice from three workers", flush=True)

    workers = [Worker.remote() for _ in range(3)]
    ray.get([w.shout.remote() for w in workers])  # Ray shows the first, holds back the rest
    console.say_last("the command's last line")
print("ray still up:", ray.is_initialized(), file=sys.stderr)
"""


@pytest.mark.slow  # a Ray of its own, in a child process
def test_ray_s_held_back_notices_land_in_the_log_before_the_command_s_last_line(tmp_path):
    """Ray prints the notices it held back ("[repeated 2x across cluster]") as it disconnects: a command
    leaves the Ray it started inside its session, so they reach the log and never follow its last line."""
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_DEDUP_LOGS": "1"}  # a user's default
    done = subprocess.run([sys.executable, "-c", SESSION_WITH_RAY, str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    terminal = done.stdout.splitlines()
    assert terminal[-1] == "[swerve] the command's last line", terminal
    assert "repeated" not in done.stdout + done.stderr, terminal
    assert "ray still up: False" in done.stderr, done.stderr[-3000:]
    log = (tmp_path / "logs" / "console.log").read_text()
    assert "the same notice from three workers" in log and "repeated 2x across cluster" in log, log[-3000:]
