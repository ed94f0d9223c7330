"""The Python entry of the Ray workers paid once per concurrent episode (episode and sandbox actors).

Ray's worker registers serializers for pyarrow and pydantic whenever they are installed
(ray.util.serialization_addons), so every worker imports both, and numpy through pyarrow: about
17 MB of private memory per process, twice per episode (swerve bench scale, "memory_per_episode_by_kind").
Episode and sandbox actors never send either. This entry makes that registration, and it alone,
find them absent, then runs Ray's worker unchanged: any other import of them works.

    runtime_env={"py_executable": f"{sys.executable} -m actors.fleet.lean_worker"}  # see lean_runtime_env()

Ray starts a worker as `exec <py_executable> <default_worker.py> <its arguments>`.
Nothing here may import Ray or this repo's heavier modules: it runs before the worker does.
"""
from __future__ import annotations

import importlib.abc
import runpy
import shlex
import sys

# The modules Ray imports them from, only to register serializers (ray 2.60).
RAY_REGISTRATION = ("ray.util.serialization_addons", "ray._common.pydantic_compat", "ray._private.arrow_serialization")
SKIPPED = ("pyarrow", "pydantic")


class SkipRaySerializerImports(importlib.abc.MetaPathFinder):
    """Answers "not installed" to an import of a SKIPPED package made by RAY_REGISTRATION's code."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in SKIPPED and importing_module() in RAY_REGISTRATION:
            raise ModuleNotFoundError(f"{name} is not loaded by this worker (actors/fleet/lean_worker.py)", name=name)
        return None  # the other finders decide


def importing_module() -> str:
    """The module whose code runs the import statement being resolved (past importlib's frames)."""
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if frame.f_code.co_filename != __file__ and not module.startswith("importlib"):
            return module
        frame = frame.f_back
    return ""


def lean_runtime_env() -> dict:
    """Ray options' runtime_env for an actor started through this entry. It is merged with the job's
    (its setup hook, redaction, still runs). The driver's interpreter: a cluster's nodes share one image."""
    return {"py_executable": f"{shlex.quote(sys.executable)} -m {__name__}"}


def main(argv: list) -> None:
    """argv: Ray's worker script, then its arguments."""
    if not argv:
        raise SystemExit("usage: python -m actors.fleet.lean_worker <ray default_worker.py> [its arguments]")
    sys.meta_path.insert(0, SkipRaySerializerImports())
    sys.argv = list(argv)
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
