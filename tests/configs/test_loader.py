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
    assert cfg.engine.num_engines == 1 != load_config(None).engine.num_engines  # the YAML's override


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


@pytest.mark.parametrize("override, message", [
    ("trainer.total_steps=many", "config key 'trainer.total_steps' is 'many' (str); expected an integer"),
    ("trainer.total_steps=null", "config key 'trainer.total_steps' is null; expected an integer"),
    ("rollout.temperature=hot", "config key 'rollout.temperature' is 'hot' (str); expected a number"),
    ("sandbox.e2b_allow_internet=maybe", "expected true or false"),
    ("trainer.betas=3", "config key 'trainer.betas' is 3 (int); expected a list of numbers"),
    ("run.name=[1,2]", "config key 'run.name' is [1, 2] (list); expected a string"),
    ("env.kwargs=3", "config key 'env.kwargs' is 3 (int); expected a mapping"),
])
def test_wrong_types_name_the_key_the_value_and_the_expected_type(override, message):
    with pytest.raises(ConfigError) as caught:
        load_config(None, [override])
    assert message in str(caught.value)
    assert "full_key" not in str(caught.value)  # no omegaconf internals


@pytest.mark.parametrize("override, fix", [
    ("rollout.max_staleness=-1", "it must be >= 0"),
    ("run.plot_every_s=-5", "run.plot_every_s=0"),
    ("trainer.checkpoint_every_s=-1", "trainer.checkpoint_every_s=0"),
    ("engine.num_engines=0", "engine.num_engines=1"),
    ("rollout.max_total_tokens=8", "raise rollout.max_total_tokens or lower rollout.max_tokens_per_turn"),
])
def test_invalid_values_name_the_fix(override, fix):
    with pytest.raises(ConfigError, match=fix.replace(".", r"\.")):
        load_config(None, [override])


def test_mixed_precision_on_megatron_is_refused_with_its_own_key():
    with pytest.raises(ConfigError, match=r"trainer\.params_dtype=bfloat16 trainer\.mixed_precision=off"):
        load_config(None, ["trainer.backend=megatron", "trainer.mixed_precision=auto"])
    assert load_config(None, ["trainer.backend=megatron"]).trainer.mixed_precision == "off"


def test_a_section_set_to_a_value_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"'engine' is a section, not a value \(3\); set its keys instead, e.g. engine\."):
        load_config(None, ["engine=3"])
    path = tmp_path / "scalar.yaml"
    path.write_text("rollout: 5\n")
    with pytest.raises(ConfigError, match="'rollout' is a section"):
        load_config(str(path))


def test_yaml_that_is_not_a_mapping_or_not_yaml_names_the_file(tmp_path):
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match=r"list.yaml' holds a ListConfig, not a mapping of sections"):
        load_config(str(listing))
    broken = tmp_path / "broken.yaml"
    broken.write_text("engine: {num_engines: 2\n")
    with pytest.raises(ConfigError, match=r"(?s)broken.yaml' is not valid YAML .*line 2"):
        load_config(str(broken))


def test_expected_type_is_described_for_nested_and_free_form_keys():
    from configs.loader import _describe, _leaf_type

    assert _describe(_leaf_type("trainer.betas[1]")) == "a number"
    assert _describe(_leaf_type("tasks.ids")) == "a list of strings"
    # A key inside env.kwargs has no declared type; describing it must not raise.
    assert _describe(_leaf_type("env.kwargs.depth.x")) == "the type configs/schema/ declares"


def test_a_yaml_file_states_only_how_it_differs_from_its_base(tmp_path):
    (tmp_path / "parent.yaml").write_text("trainer:\n  total_steps: 7\n  lr: 0.5\nrun:\n  name: parent\n")
    (tmp_path / "child.yaml").write_text("base: parent.yaml\ntrainer:\n  total_steps: 9\n")
    cfg = load_config(str(tmp_path / "child.yaml"), ["run.seed=3"])
    assert (cfg.trainer.total_steps, cfg.trainer.lr, cfg.run.name, cfg.run.seed) == (9, 0.5, "parent", 3)


def test_a_base_cycle_or_a_bad_base_is_refused(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(str(tmp_path / "a.yaml"))
    (tmp_path / "c.yaml").write_text("base: [a.yaml]\n")
    with pytest.raises(ConfigError, match="must name a YAML file"):
        load_config(str(tmp_path / "c.yaml"))
    (tmp_path / "d.yaml").write_text("base: missing.yaml\n")
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "d.yaml"))


def test_fractions_outside_zero_one_name_their_key():
    for key in ("rollout.explore_fraction", "pipeline.recovery_rate"):
        with pytest.raises(ConfigError, match=rf"{key}.*allowed: \[0, 1\]"):
            load_config(None, [f"{key}=1.5"])


def test_an_agent_harness_timeouts_must_nest():
    cfg = load_config("configs/harness_mini_swe_agent.yaml", [])
    assert cfg.sandbox.command_timeout_s < cfg.env.harness.step_timeout_s < cfg.rollout.max_episode_seconds \
        < cfg.deadlines.gateway_request_s
    for override, named in (("env.harness.step_timeout_s=240", "env.harness.step_timeout_s"),
                            ("sandbox.command_timeout_s=500", "sandbox.command_timeout_s"),
                            ("deadlines.gateway_request_s=60", "rollout.max_episode_seconds")):
        with pytest.raises(ConfigError, match=f"'{named}'.*timeouts nest"):
            load_config("configs/harness_mini_swe_agent.yaml", [override])
    load_config("configs/default.yaml", ["env.harness.step_timeout_s=100000"])  # only the harness env nests them
