"""The env, tasks and sandbox sections: the SWE env's own section (typed choices: test_literal_choices.py)."""
import pytest

from configs import ConfigError, load_config


def test_env_swe_keys_load_and_unknown_ones_are_named():
    cfg = load_config(None, ["env.swe.grade_timeout_s=120", "env.swe.tamper_scores_zero=false"])
    assert (cfg.env.swe.grade_timeout_s, cfg.env.swe.tamper_scores_zero) == (120.0, False)
    with pytest.raises(ConfigError, match="unknown config key 'env.swe.command_timeout_s'"):
        load_config(None, ["env.swe.command_timeout_s=60"])


def test_the_default_recipe_grades_micro_tasks_under_a_minute():
    cfg = load_config("configs/default.yaml")
    assert cfg.env.swe.max_observation_chars == 300 and cfg.env.swe.grade_timeout_s == 60.0
    assert cfg.env.kwargs == {}
