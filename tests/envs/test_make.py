"""make_env builds the env a run plays, with the run's config (the episode actor and the expert
build theirs through it)."""
import dataclasses
import time

import pytest

from configs import load_config
from configs.schema import EnvConfig, SandboxConfig
from envs.sandboxes.local_sandbox import LocalSandbox
from envs.make import make_env
from envs.reverse_env import ReverseEnv
from envs.swe_env import SWEEnv


class RecordingSandbox(LocalSandbox):
    """A local lease that records the time limit each command ran under: the one passed, else
    its own sandbox.command_timeout_s (as every backend resolves it)."""

    def __init__(self, config: SandboxConfig):
        super().__init__(config)
        self.limits_s: list[float] = []

    def exec(self, command, timeout_s=None):
        self.limits_s.append(self.config.command_timeout_s if timeout_s is None else timeout_s)
        return super().exec(command, timeout_s)


def bash(command: str) -> str:
    return f"```bash\n{command}\n```"


def test_the_recipes_command_timeout_is_the_one_every_command_runs_under(tmp_path, task_by_id):
    """The reference recipe sets sandbox.command_timeout_s: 60. The env used to pass its own
    20 s to every command, so the recipe's value never took effect."""
    cfg = load_config("configs/qwen3_30b_a3b_swe.yaml", ["env.swe.listing_timeout_s=7"])
    assert cfg.sandbox.command_timeout_s == 60.0
    # The lease an episode actor hands the env is built from the run's sandbox section.
    lease = RecordingSandbox(dataclasses.replace(cfg.sandbox, backend="local", isolation="none",
                                                 workdir_root=str(tmp_path)))
    env = make_env(cfg.env, cfg.sandbox, cfg.tasks)
    try:
        env.reset(seed=0, options={"task": task_by_id["textkit-001"], "sandbox": lease})
        # The env's own listing of the pristine workspace, under its own limit.
        assert lease.limits_s[-1] == cfg.env.swe.listing_timeout_s == 7.0
        lease.limits_s.clear()
        observation = env.step(bash("echo hi"))[0]
    finally:
        env.close()
    assert observation == "exit code: 0\nhi\n"
    assert lease.limits_s == [60.0]


@pytest.mark.slow
def test_a_command_is_killed_at_the_runs_limit(tmp_path, task_by_id):
    """The env's own lease (no sandbox in options) is built from the run's sandbox section too."""
    cfg = load_config("configs/default.yaml", ["sandbox.command_timeout_s=1", f"sandbox.workdir_root={tmp_path}"])
    env = make_env(cfg.env, cfg.sandbox, cfg.tasks)
    try:
        env.reset(options={"task": task_by_id["textkit-001"]})
        started_s = time.monotonic()
        observation, _, terminated, _, info = env.step(bash("sleep 5"))
    finally:
        env.close()
    assert observation.startswith("exit code: 124 (timed out after 1.0s") and not terminated
    assert info["exit_code"] == 124 and time.monotonic() - started_s < 4


def test_the_recipes_env_settings_and_kwargs_overrides_reach_the_env(tmp_path):
    cfg = load_config("configs/default.yaml", ["env.kwargs.tamper_scores_zero=false", "env.swe.grade_timeout_s=90",
                                               f"sandbox.workdir_root={tmp_path}", "tasks.split=eval"])
    env = make_env(cfg.env, cfg.sandbox, cfg.tasks)
    swe_env = env.unwrapped
    assert isinstance(swe_env, SWEEnv)
    assert swe_env.config.max_observation_chars == 300  # default.yaml: env.swe.max_observation_chars
    assert (swe_env.config.grade_timeout_s, swe_env.config.tamper_scores_zero) == (90.0, False)
    assert swe_env.sandbox_config == cfg.sandbox and swe_env.tasks_config.split == "eval"
    assert cfg.env.swe.tamper_scores_zero  # the override is the env's, the run's section is unchanged
    env.close()


def test_another_env_gets_env_kwargs_alone():
    env = make_env(EnvConfig(id="swerve/Reverse-v0"), SandboxConfig())
    assert isinstance(env.unwrapped, ReverseEnv)
    env.close()
    with pytest.raises(TypeError):  # ReverseEnv takes no settings: kwargs reach it as they are
        make_env(EnvConfig(id="swerve/Reverse-v0", kwargs={"max_observation_chars": 10}), SandboxConfig())


@pytest.mark.parametrize("key, home", [("sandbox", "sandbox"), ("swe", "env.swe"), ("tasks", "tasks")])
def test_a_section_in_env_kwargs_is_refused_with_its_home(key, home):
    with pytest.raises(ValueError, match=rf"env.kwargs.{key} is not read: set {home}\.\*"):
        make_env(EnvConfig(kwargs={key: {}}), SandboxConfig())
