"""The sandbox actor's process holds one lease and is started once per concurrent episode: what it
imports is memory paid that many times (swerve bench scale), so it imports no env and no config loader."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]  # this checkout, wherever it was cloned
# What a sandbox needs none of: the env side (gymnasium, numpy), the config loader (omegaconf), the
# gateway's HTTP server (aiohttp), the trainer's torch.
NOT_NEEDED = ("gymnasium", "numpy", "omegaconf", "aiohttp", "torch", "transformers")


def test_the_sandbox_actor_and_its_arguments_import_no_env_loader_or_server():
    # What the actor's process loads: its class's module, then its arguments and a task (unpickled).
    code = ("import json, pickle, sys; import actors.episodes.sandbox_actor; "
            "from configs.schema import SandboxConfig; from envs.tasks.task import Task; "
            "pickle.loads(pickle.dumps(SandboxConfig())); "
            f"print(json.dumps(sorted(n for n in {NOT_NEEDED!r} if n in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
