import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers the environments)
from configs.schema import SandboxConfig, SWEEnvConfig, TasksConfig
from envs.sandboxes.local_sandbox import LocalSandbox
from envs.outcomes import ActorLost, InfraError, InfraSource
from envs.swe_env import SWEEnv


@pytest.fixture
def env(tmp_path):
    environment = SWEEnv(sandbox={"workdir_root": str(tmp_path)})
    yield environment
    environment.close()


def bash(command: str) -> str:
    return f"I will run this.\n```bash\n{command}\n```\n"


@pytest.mark.slow
def test_make_and_check_env_pass_without_warnings(tmp_path):
    environment = gymnasium.make("swerve/SWE-v0", sandbox={"workdir_root": str(tmp_path)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(environment.unwrapped)
    assert [str(w.message) for w in caught] == []
    environment.close()


@pytest.mark.slow
def test_fix_through_step_and_submit(env, task_by_id):
    task = task_by_id["textkit-003"]
    observation, info = env.reset(seed=0, options={"task": task})
    assert observation == task.problem_statement and info["task_id"] == "textkit-003"
    assert info["sandbox_start_s"] > 0 and info["outcome"] is None
    observation, reward, terminated, truncated, info = env.step(
        bash("sed -i 's/if len(text) < width:/if len(text) <= width:/' textkit/wrap.py")
    )
    assert observation.startswith("exit code: 0") and not terminated and info["exec_s"] > 0
    observation, reward, terminated, truncated, info = env.step(bash("submit"))
    assert (reward, terminated, truncated, info["outcome"]) == (1.0, True, False, "resolved")
    assert set(info["test_status"].values()) == {"PASSED"} and info["grading_problems"] == []


@pytest.mark.slow
def test_submit_without_fix_is_unresolved(env, task_by_id):
    env.reset(options={"task": task_by_id["inventory-002"]})
    observation, reward, terminated, _, info = env.step(bash("submit"))
    assert (reward, terminated, info["outcome"]) == (0.0, True, "unresolved")
    assert info["test_status"]["tests/test_stack.py::test_peek_returns_top"] == "FAILED"
    assert "FAILED tests/test_stack.py::test_peek_returns_top" in observation
    with pytest.raises(RuntimeError):
        env.step(bash("ls"))


def test_consecutive_format_errors_end_the_episode(env, task_by_id):
    env.reset(options={"task": task_by_id["textkit-001"]})
    assert env.step("no block")[2] is False
    assert env.step(bash("true"))[2] is False  # a valid action resets the count
    for _ in range(2):
        observation, reward, terminated, _, info = env.step("still no block")
        assert not terminated and info["outcome"] is None and observation.startswith("Format error")
    observation, reward, terminated, _, info = env.step("```python\nprint(1)\n```")
    assert (reward, terminated, info["outcome"]) == (0.0, True, "format_error")


@pytest.mark.slow
def test_random_actions_never_run_commands(tmp_path, task_by_id):
    environment = SWEEnv(max_consecutive_format_errors=10_000, sandbox={"workdir_root": str(tmp_path)})
    environment.reset(seed=1, options={"task": task_by_id["textkit-001"]})
    environment.action_space.seed(1)
    for _ in range(5):
        observation, reward, terminated, _, _ = environment.step(environment.action_space.sample())
        assert observation.startswith("Format error") and reward == 0.0 and not terminated
    environment.close()


def test_long_output_is_truncated_into_the_space(env, task_by_id):
    env.reset(options={"task": task_by_id["textkit-001"]})
    observation = env.step(bash("python -c \"print('a' * 5000 + 'Z' * 5000 + '\\x1b')\""))[0]
    assert len(observation) <= env.config.max_observation_chars and "characters elided" in observation
    assert observation.startswith("exit code: 0\naaa") and observation.rstrip().endswith("Z\ufffd")
    assert env.observation_space.contains(observation)


def test_command_timeout_is_reported(tmp_path, task_by_id):
    environment = SWEEnv(sandbox={"command_timeout_s": 0.5, "workdir_root": str(tmp_path)})
    environment.reset(options={"task": task_by_id["textkit-001"]})
    observation, _, terminated, _, info = environment.step(bash("sleep 5"))
    assert observation.startswith("exit code: 124 (timed out") and not terminated
    assert info["exec_s"] < 3
    environment.close()


def test_oversized_replies_and_commands_are_format_errors_and_the_episode_goes_on(env, task_by_id):
    # Without the parser's limits a 200 kB command fails exec (E2BIG) as an infrastructure error.
    env.reset(options={"task": task_by_id["textkit-001"]})
    huge_reply = "word " * 300_000 + bash("ls")
    observation, reward, terminated, _, info = env.step(huge_reply)
    assert observation.startswith("Format error: the reply is") and "over the limit" in observation
    assert (reward, terminated, info["exec_s"]) == (0.0, False, 0.0)
    observation, _, terminated, _, _ = env.step(bash("echo " + "y" * 200_000))
    assert "over the limit of 100000" in observation and not terminated
    observation, _, terminated, _, _ = env.step(bash("echo still-here"))
    assert observation == "exit code: 0\nstill-here\n" and not terminated


@pytest.mark.slow
def test_seeded_reset_picks_the_same_task(env):
    first = env.reset(seed=5)[1]["task_id"]
    assert env.reset(seed=5)[1]["task_id"] == first
    assert len({env.reset(seed=seed)[1]["task_id"] for seed in range(12)}) > 1


def test_passed_sandbox_is_used_and_its_loss_propagates(env, tmp_path, task_by_id):
    sandbox = LocalSandbox(SandboxConfig(workdir_root=str(tmp_path)))
    env.reset(options={"task": task_by_id["textkit-001"], "sandbox": sandbox})
    assert (sandbox.workspace / "textkit").is_dir()
    sandbox.close()  # the lease dies underneath the episode
    with pytest.raises(InfraError) as error:
        env.step(bash("ls"))
    assert error.value.source is InfraSource.SANDBOX


def test_a_lease_lost_while_the_final_change_is_taken_ends_the_episode_as_that_infra_error(env, tmp_path, task_by_id,
                                                                                          monkeypatch):
    """A cap ended the episode and its change is read back: a sandbox that dies then leaves the
    record incomplete, so the error reaches the episode (infra_error, never scored), not a quiet
    empty patch."""
    sandbox = LocalSandbox(SandboxConfig(workdir_root=str(tmp_path)))
    env.reset(options={"task": task_by_id["textkit-001"], "sandbox": sandbox})
    env.step(bash("echo 'x = 1' > extra.py"))

    def dies():
        raise ActorLost(InfraSource.SANDBOX, "reset on sandbox actor failed: RayActorError")

    monkeypatch.setattr(sandbox, "reset", dies)
    with pytest.raises(InfraError, match="RayActorError"):
        env.final_change()
    for _ in range(2):
        env.step("no block")
    with pytest.raises(InfraError, match="RayActorError"):  # the format-error end takes it too
        env.step("no block")
    sandbox.close()


def test_close_ends_a_passed_lease(tmp_path, task_by_id):
    sandbox = LocalSandbox(SandboxConfig(workdir_root=str(tmp_path)))
    environment = SWEEnv()
    environment.reset(options={"task": task_by_id["textkit-001"], "sandbox": sandbox})
    workspace = sandbox.workspace
    environment.close()
    assert not workspace.exists()


def test_kwargs_override_config_and_unknown_ones_are_named():
    environment = SWEEnv(tasks={"split": "eval"}, max_observation_chars=500, sandbox={"isolation": "none"})
    assert environment.tasks_config.split == "eval" and environment.observation_space.max_length == 500
    assert environment.sandbox_config == SandboxConfig(isolation="none")
    with pytest.raises(TypeError, match="max_observation_chars"):
        SWEEnv(max_obs_chars=10)
    with pytest.raises(TypeError, match="memory_mb"):
        SWEEnv(sandbox={"memory": 10})
    # A sandbox setting given as an env setting names its home.
    with pytest.raises(TypeError, match=r"command_timeout_s is a sandbox field"):
        SWEEnv(command_timeout_s=60)


def test_typed_sections_are_kept_and_keyword_settings_override_the_swe_section():
    swe, sandbox, tasks = SWEEnvConfig(grade_timeout_s=7.0), SandboxConfig(memory_mb=512), TasksConfig(source="micro")
    environment = SWEEnv(swe=swe, sandbox=sandbox, tasks=tasks, tamper_scores_zero=False)
    assert environment.sandbox_config is sandbox and environment.tasks_config is tasks
    assert environment.config == SWEEnvConfig(grade_timeout_s=7.0, tamper_scores_zero=False)
    assert swe.tamper_scores_zero  # the run's section itself is not changed


def test_an_unlistable_workspace_is_the_agents_doing_not_an_infra_error(tmp_path, task_by_id):
    """A flood of files or a folder made unreadable would otherwise turn a failed attempt into an
    infra error, which training skips: a policy could learn to escape its zeros that way."""
    environment = SWEEnv(sandbox={"workdir_root": str(tmp_path), "max_output_bytes": 4096})
    for command in ("for i in $(seq 300); do echo > flood_$i.txt; done", "chmod 000 textkit"):
        environment.reset(options={"task": task_by_id["textkit-003"]})
        environment.step(bash(command))
        _, reward, terminated, _, info = environment.step(bash("submit"))
        assert terminated and reward == 0.0 and info["outcome"] == "unresolved"
        # (Without bubblewrap commands run as this host's user, who may still read the folder.)
        assert info["tampered"] or info["unresolved_reason"] or (command.startswith("chmod")
                                                                 and not environment._sandbox.isolated)
    environment.close()


@pytest.mark.slow
def test_running_the_tests_and_tools_is_not_tampering(env, task_by_id):
    """What an honest agent leaves behind (pytest's cache, an editable install's metadata, a
    scratch script) is dropped from the graded view without a flag."""
    env.reset(options={"task": task_by_id["textkit-003"]})
    for command in ("python -m pytest -q tests", "mkdir -p textkit.egg-info && echo x > textkit.egg-info/PKG-INFO",
                    "printf 'print(1)\\n' > reproduce.py",
                    "sed -i 's/if len(text) < width:/if len(text) <= width:/' textkit/wrap.py"):
        env.step(bash(command))
    _, reward, _, _, info = env.step(bash("submit"))
    assert reward == 1.0 and info["tampered"] == {}
    assert "reproduce.py" in info["model_patch"] and ".pytest_cache" not in info["model_patch"]


def test_a_command_with_a_lone_surrogate_is_a_format_error_and_the_episode_goes_on(tmp_path, task_by_id):
    environment = SWEEnv(max_consecutive_format_errors=2, sandbox={"workdir_root": str(tmp_path)})
    environment.reset(options={"task": task_by_id["textkit-001"]})
    observation, reward, terminated, _, info = environment.step(bash("echo \ud800 > planted.py"))
    assert observation.startswith("Format error: the command is not valid UTF-8") and not terminated
    assert (reward, info["exec_s"]) == (0.0, 0.0) and environment.observation_space.contains(observation)
    assert environment.step(bash("ls planted.py; echo still-here"))[0].endswith("still-here\n")
    environment.step(bash("echo \udc80"))
    _, reward, terminated, _, info = environment.step(bash("echo \ud800"))  # counted: two in a row end it
    assert (reward, terminated, info["outcome"]) == (0.0, True, "format_error")
    environment.close()
