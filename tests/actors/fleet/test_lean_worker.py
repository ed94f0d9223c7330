"""The lean worker entry: Ray's serializer registration finds pyarrow and pydantic absent, nothing
else does, and a lean actor in a run's Ray (its job runtime_env) is still redacted."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.fleet.lean_worker import RAY_REGISTRATION, SkipRaySerializerImports, lean_runtime_env, main

REPO = Path(__file__).resolve().parents[3]  # this checkout, wherever it was cloned


@pytest.mark.parametrize("importer", RAY_REGISTRATION)
def test_ray_s_registration_is_told_pyarrow_and_pydantic_are_absent(importer):
    finder = SkipRaySerializerImports()
    for name in ("pyarrow", "pyarrow.json", "pydantic", "pydantic.v1"):
        with pytest.raises(ModuleNotFoundError, match="lean_worker"):
            exec("finder.find_spec(name)", {"__name__": importer, "finder": finder, "name": name})
    # Any other package is left to the other finders.
    scope = {"__name__": importer, "finder": finder}
    exec("found = finder.find_spec('numpy')", scope)
    assert scope["found"] is None


@pytest.mark.parametrize("importer", ["envs.sandboxes.e2b_sandbox", "ray.util.state.common", "__main__"])
def test_any_other_importer_gets_them(importer):
    scope = {"__name__": importer, "finder": SkipRaySerializerImports()}
    exec("found = [finder.find_spec(n) for n in ('pyarrow', 'pydantic')]", scope)
    assert scope["found"] == [None, None]


def test_the_entry_names_this_interpreter_and_needs_ray_s_worker_script():
    assert lean_runtime_env() == {"py_executable": f"{sys.executable} -m actors.fleet.lean_worker"}
    with pytest.raises(SystemExit, match="default_worker.py"):
        main([])


# A run's Ray (actors/fleet/launch.py init_ray, with its job runtime_env), one lean and one plain
# probe: which of Ray's optional serializers each loaded (pyarrow's library mapped, pydantic seen),
# whether the job's setup hook still redacts the lean one, and that pydantic imports there on demand.
PROBE = """
import json, os, sys
import ray
from actors.fleet.launch import init_ray
from actors.fleet.lean_worker import lean_runtime_env
from configs import Config

cfg = Config()
cfg.ray.dashboard = False
cfg.ray.num_cpus = 1
init_ray(cfg)

@ray.remote(num_cpus=0)
class Probe:
    def look(self):
        ray._private.worker.global_worker.get_serialization_context()  # registers Ray's serializers, if not yet
        from ray._common import pydantic_compat
        from actors.report.redact import RedactingStream
        with open("/proc/self/maps") as maps:
            arrow_mapped = "libarrow" in maps.read()
        seen = pydantic_compat.PYDANTIC_INSTALLED
        import pydantic  # what the actor's own code may still import
        return {"arrow_mapped": arrow_mapped, "pydantic_seen_by_ray": seen,
                "redacted": isinstance(sys.stdout, RedactingStream), "pydantic": pydantic.VERSION}

lean = Probe.options(runtime_env=lean_runtime_env()).remote()
plain = Probe.remote()
print(json.dumps({"lean": ray.get(lean.look.remote()), "plain": ray.get(plain.look.remote())}))
"""


@pytest.mark.slow  # a Ray of its own: the job runtime_env is what is under test
def test_a_lean_actor_in_a_run_s_ray_skips_ray_s_optional_serializers_and_is_still_redacted():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "RAY_ADDRESS": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["plain"]["arrow_mapped"] and seen["plain"]["pydantic_seen_by_ray"]  # what Ray does unasked
    assert not seen["lean"]["arrow_mapped"] and not seen["lean"]["pydantic_seen_by_ray"]
    assert seen["lean"]["redacted"] and seen["plain"]["redacted"]
    assert seen["lean"]["pydantic"]
