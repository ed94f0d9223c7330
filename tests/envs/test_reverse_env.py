import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers the environments)


@pytest.fixture
def env():
    environment = gymnasium.make("swerve/Reverse-v0")
    yield environment.unwrapped
    environment.close()


def test_check_env_passes(env):
    check_env(env)


def test_seeded_reset_is_deterministic(env):
    first, info = env.reset(seed=7)
    assert env.reset(seed=7)[0] == first
    assert info["outcome"] is None and info["task_id"].startswith("reverse-")
    assert {env.reset(seed=seed)[0] for seed in range(30)} != {first}


@pytest.mark.parametrize("template", ["```bash\necho {}\n```", "Sure.\n```bash\necho '{}'\n```\n"])
def test_correct_answer_is_rewarded(env, template):
    env.reset(seed=3)
    _, reward, terminated, truncated, info = env.step(template.format(env.word[::-1]))
    assert (reward, terminated, truncated, info["outcome"]) == (1.0, True, False, "resolved")


def test_wrong_answer_and_format_error(env):
    env.reset(seed=3)
    _, reward, terminated, _, info = env.step(f"```bash\necho {env.word}\n```")
    assert (reward, terminated, info["outcome"]) == (0.0, True, "unresolved")
    env.reset(seed=3)
    observation, reward, terminated, _, info = env.step(env.word[::-1])
    assert (reward, terminated, info["outcome"]) == (0.0, True, "format_error")
    assert observation.startswith("Format error")


def test_a_task_fixes_the_word_for_every_seed():
    from envs.tasks.loaders import load_tasks

    env = gymnasium.make("swerve/Reverse-v0")
    task = load_tasks("builtin", "train")[0]
    words = {env.reset(seed=s, options={"task": task})[0] for s in range(5)}
    assert len(words) == 1
