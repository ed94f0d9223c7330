"""Importing envs registers its gymnasium ids whichever of envs and gymnasium comes first, and
importing envs alone (a sandbox actor's process) loads neither gymnasium nor numpy."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]  # this checkout, wherever it was cloned
REPORT = ("print(json.dumps([sorted(n for n in ('gymnasium', 'numpy') if n in loaded), "
          "sorted(i for i in gymnasium.registry if i.startswith('swerve/'))]))")


def _fresh(code: str):
    done = subprocess.run([sys.executable, "-c", f"import json, sys\n{code}\n{REPORT}"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("first", ["envs", "gymnasium"])
def test_the_ids_are_registered_whichever_comes_first(first):
    second = "gymnasium" if first == "envs" else "envs"
    loaded, ids = _fresh(f"import {first}\nloaded = set(sys.modules)\nimport {second}")
    assert ids == ["swerve/Harness-v0", "swerve/Reverse-v0", "swerve/SWE-v0"]
    if first == "envs":
        assert loaded == []  # envs alone pulled in neither


def test_reimporting_envs_registers_once_and_the_envs_make():
    loaded, ids = _fresh("import importlib, envs, gymnasium\nimportlib.reload(envs)\nloaded = set(sys.modules)\n"
                         "gymnasium.make('swerve/Reverse-v0').close()\n"
                         "assert sum(type(f).__name__ == '_RegisterOnGymnasiumImport' for f in sys.meta_path) == 0")
    assert len(ids) == 3
