import pytest

from configs import Config, ConfigError, load_config, to_yaml
from configs.loader import all_keys


def test_defaults_come_from_dataclasses():
    cfg = load_config()
    assert isinstance(cfg, Config)
    assert cfg.rollout.max_staleness == 1 and cfg.trainer.backend == "torch"


def test_default_yaml_only_overrides_and_loads():
    cfg = load_config("configs/default.yaml")
    assert cfg.env.id == "swerve/SWE-v0"
    assert cfg.engine.num_engines == 2


def test_key_value_overrides_are_typed(tmp_path):
    cfg = load_config(None, ["trainer.total_steps=7", "rollout.temperature=0.5", "run.dir=" + str(tmp_path)])
    assert cfg.trainer.total_steps == 7 and cfg.rollout.temperature == 0.5
    assert cfg.run.dir == str(tmp_path)


def test_unknown_key_suggests_nearest():
    with pytest.raises(ConfigError, match=r"unknown config key 'rollout.max_stalenes'.*'rollout.max_staleness'"):
        load_config(None, ["rollout.max_stalenes=2"])


def test_unknown_section_suggests_nearest():
    with pytest.raises(ConfigError, match="did you mean 'trainer"):
        load_config(None, ["trainr.total_steps=2"])


def test_unknown_key_in_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("engine:\n  num_engine: 3\n")
    with pytest.raises(ConfigError, match="engine.num_engines"):
        load_config(str(path))


def test_wrong_type_names_key():
    with pytest.raises(ConfigError, match="trainer.total_steps"):
        load_config(None, ["trainer.total_steps=many"])


def test_choice_lists_allowed_values():
    with pytest.raises(ConfigError, match=r"rollout.mode.*allowed: async, sync"):
        load_config(None, ["rollout.mode=eventually"])


@pytest.mark.parametrize("override, key", [
    ("rollout.max_staleness=-1", "rollout.max_staleness"),
    ("engine.num_engines=0", "engine.num_engines"),
    ("rollout.max_total_tokens=8", "rollout.max_total_tokens"),
])
def test_invalid_values_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, [override])


def test_missing_file_names_fix():
    with pytest.raises(ConfigError, match="--config"):
        load_config("/nonexistent/x.yaml")


def test_env_kwargs_is_free_form():
    cfg = load_config(None, ["env.kwargs.max_observation_chars=500"])
    assert cfg.env.kwargs == {"max_observation_chars": 500}


def test_yaml_dump_round_trips(tmp_path):
    cfg = load_config(None, ["trainer.lr=0.001"])
    path = tmp_path / "c.yaml"
    path.write_text(to_yaml(cfg))
    assert load_config(str(path)) == cfg


def test_all_keys_lists_leaves():
    keys = all_keys()
    assert "run.name" in keys and "faults.llm_error_rate" in keys and "run" not in keys
