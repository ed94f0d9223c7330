"""Gymnasium text environments: the envs (`swe_env`, `harness_env`, `reverse_env`, built by
`make.make_env`), the action protocol (`actions`, `text`), the outcome classes every part shares
(`outcomes`), and what drives envs over tasks (`expert`, `validate`, `image_suite`). Below them, by
concept: `tasks/` (what an episode is asked to fix), `sandboxes/` (where it runs) and `grading/`
(how it is judged); each says what it may import. No Ray, no model, nothing of `policies`.

Importing envs (any module of it) registers `swerve/SWE-v0`, `swerve/Harness-v0` and `swerve/Reverse-v0` with
gymnasium: at once when gymnasium is already imported, else the moment it is first imported. So a
process that uses only part of envs without an env (a sandbox actor, one per concurrent episode)
never imports gymnasium and numpy. Entry points are strings, so registering imports neither env and
the package stays cheap to import. `envs.make.make_env` builds the configured env with the run's config.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys

from envs.outcomes import SCORED, InfraError, InfraSource, Outcome
from envs.tasks.task import Task

ENV_IDS = {
    "swerve/SWE-v0": "envs.swe_env:SWEEnv",
    "swerve/Reverse-v0": "envs.reverse_env:ReverseEnv",
    "swerve/Harness-v0": "envs.harness_env:HarnessEnv",
}


def _register() -> None:
    import gymnasium

    for env_id, entry_point in ENV_IDS.items():
        # Re-importing (e.g. from several Ray workers' module reloads) must not register twice.
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point)


class _RegisterOnGymnasiumImport(importlib.abc.MetaPathFinder):
    """Finds gymnasium as the other finders do, and registers the ids once its module has run."""

    def find_spec(self, name, path=None, target=None):
        if name != "gymnasium":
            return None
        sys.meta_path.remove(self)  # once; the lookup below must not come back here
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module) -> None:
            run_module(module)
            _register()

        spec.loader.exec_module = exec_module
        return spec


if "gymnasium" in sys.modules:
    _register()
elif not any(isinstance(finder, _RegisterOnGymnasiumImport) for finder in sys.meta_path):
    sys.meta_path.insert(0, _RegisterOnGymnasiumImport())

__all__ = ["ENV_IDS", "InfraError", "InfraSource", "Outcome", "SCORED", "Task"]
