"""Gymnasium text environments: the envs (`swe_env`, `harness_env`, `reverse_env`, built by
`make.make_env`), the action protocol (`actions`, `text`), the outcome classes every part shares
(`outcomes`), and what drives envs over tasks (`expert`, `validate`, `image_suite`). Below them, by
concept: `tasks/` (what an episode is asked to fix), `sandboxes/` (where it runs) and `grading/`
(how it is judged); each says what it may import. No Ray, no model, nothing of `policies`.

Importing envs (any module of it) registers `swerve/SWE-v0`, `swerve/Harness-v0` and `swerve/Reverse-v0` with
gymnasium. Entry points are strings, so registering imports neither env and the package stays
cheap to import. `envs.make.make_env` builds the configured env with the run's config.
"""
from __future__ import annotations

import gymnasium

from envs.outcomes import SCORED, InfraError, InfraSource, Outcome
from envs.tasks.task import Task

ENV_IDS = {
    "swerve/SWE-v0": "envs.swe_env:SWEEnv",
    "swerve/Reverse-v0": "envs.reverse_env:ReverseEnv",
    "swerve/Harness-v0": "envs.harness_env:HarnessEnv",
}

for _env_id, _entry_point in ENV_IDS.items():
    # Re-importing (e.g. from several Ray workers' module reloads) must not register twice.
    if _env_id not in gymnasium.registry:
        gymnasium.register(id=_env_id, entry_point=_entry_point)

__all__ = ["ENV_IDS", "InfraError", "InfraSource", "Outcome", "SCORED", "Task"]
