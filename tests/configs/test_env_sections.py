"""The env, tasks and sandbox sections: typed choices and the SWE env's own section."""
import pytest

from configs import ConfigError, load_config


@pytest.mark.parametrize("override, allowed", [
    ("sandbox.backend=k8s", "local, docker, e2b"),
    ("sandbox.isolation=chroot", "auto, bwrap, none"),
    ("sandbox.cgroup=maybe", "auto, required, off"),
])
def test_a_sandbox_choice_lists_its_allowed_values(override, allowed):
    key, value = override.split("=")
    with pytest.raises(ConfigError, match=rf"'{key}' is '{value}'; allowed: {allowed}$"):
        load_config(None, [override])


def test_env_swe_keys_load_and_unknown_ones_are_named():
    cfg = load_config(None, ["env.swe.grade_timeout_s=120", "env.swe.tamper_scores_zero=false"])
    assert (cfg.env.swe.grade_timeout_s, cfg.env.swe.tamper_scores_zero) == (120.0, False)
    with pytest.raises(ConfigError, match="unknown config key 'env.swe.command_timeout_s'"):
        load_config(None, ["env.swe.command_timeout_s=60"])


def test_the_default_recipe_grades_micro_tasks_under_a_minute():
    cfg = load_config("configs/default.yaml")
    assert cfg.env.swe.max_observation_chars == 300 and cfg.env.swe.grade_timeout_s == 60.0
    assert cfg.env.kwargs == {}
