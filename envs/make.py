"""The run's env: `make_env(cfg.env, cfg.sandbox, cfg.tasks)` is `gymnasium.make(env.id, ...)` with
what that env takes from the run's config.

swerve/SWE-v0 (`SWEEnv`, or a subclass registered under another id) gets the run's typed
sections: `swe=env.swe`, `sandbox=sandbox`, `tasks=tasks`, with `env.kwargs` entries overriding
fields of env.swe; swerve/Harness-v0 (`HarnessEnv`) gets the same and `harness=env.harness`. Its per-command time limit is then sandbox.command_timeout_s, the one the
run's leases are built with. Any other gymnasium text env (swerve/Reverse-v0, "module:Env-v0")
gets `env.kwargs` alone, so swapping envs stays a matter of `env.id`.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Optional

import gymnasium
from gymnasium.envs.registration import load_env_creator

from configs.schema import EnvConfig, SandboxConfig, TasksConfig
from envs.harness_env import TASK_FILE, HarnessEnv
from envs.harnesses import harness_command
from envs.swe_env import SWEEnv

# Keyword arguments make_env hands the SWE env itself -> the config section each comes from.
RUN_SECTIONS = {"swe": "env.swe", "sandbox": "sandbox", "tasks": "tasks"}


def env_creator(env_id: str) -> Any:
    """What gymnasium.make would call for `env_id` (usually the env class); a "module:Env-v0" id
    imports its module first, as gymnasium.make does."""
    module, _, name = env_id.rpartition(":")
    if module:
        importlib.import_module(module)
    entry_point = gymnasium.spec(name).entry_point
    return load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point


def takes_harness(env_id: str) -> bool:
    """Whether env_id is swerve/Harness-v0 (or a subclass registered under another id)."""
    creator = env_creator(env_id)
    return isinstance(creator, type) and issubclass(creator, HarnessEnv)


def env_sandbox(env: EnvConfig, sandbox: SandboxConfig) -> SandboxConfig:
    """The run's sandbox section as the env's leases need it: under swerve/Harness-v0 the
    harness's files (its install, env.harness.files) bound read-only; otherwise unchanged."""
    if not takes_harness(env.id):
        return sandbox
    launch = harness_command(env.harness, task_file=TASK_FILE, workdir=".", command_timeout_s=sandbox.command_timeout_s)
    return dataclasses.replace(sandbox, ro_binds=sorted(set(sandbox.ro_binds) | set(launch.files)))


def takes_run_config(env_id: str) -> bool:
    creator = env_creator(env_id)
    return isinstance(creator, type) and issubclass(creator, (SWEEnv, HarnessEnv))


def make_env(env: EnvConfig, sandbox: SandboxConfig, tasks: Optional[TasksConfig] = None) -> gymnasium.Env:
    """gymnasium.make(env.id) with the run's config (see the module docstring). `tasks` matters
    only to an env that picks its own task (reset without options["task"]); None: the defaults."""
    if not takes_run_config(env.id):
        return gymnasium.make(env.id, **env.kwargs)
    misplaced = sorted(set(env.kwargs) & set(RUN_SECTIONS))
    if misplaced:
        # A lease is built from sandbox.*, never from env.kwargs: an override here would reach
        # only the env's own sandbox and silently differ from the run's.
        raise ValueError(f"env.kwargs.{misplaced[0]} is not read: set {RUN_SECTIONS[misplaced[0]]}.* in the config instead")
    harness = {"harness": env.harness} if takes_harness(env.id) else {}
    return gymnasium.make(env.id, swe=env.swe, sandbox=sandbox, tasks=tasks or TasksConfig(), **harness, **env.kwargs)
