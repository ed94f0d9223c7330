"""The defaults hold together: every check the loader makes passes with defaults alone, for every
env id and every agent harness, and for every shipped config switched to the harness env."""
import typing
from pathlib import Path

import pytest

from configs import ConfigError, load_config
from configs.loader import HARNESS_ENV_ID
from configs.schema import HarnessConfig
from envs import ENV_IDS
from envs.harnesses import HARNESS_NAMES

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))
# What a `command` harness cannot go without: the program (README's own example).
COMMAND = "env.harness.command='python3 /opt/agent/run.py'"


def _harness(name: str) -> list[str]:
    return [f"env.id={HARNESS_ENV_ID}", f"env.harness.name={name}"] + ([COMMAND] if name == "command" else [])


def test_the_launcher_and_the_schema_know_the_same_harnesses():
    assert HARNESS_NAMES == typing.get_args(typing.get_type_hints(HarnessConfig)["name"])


@pytest.mark.parametrize("env_id", sorted(ENV_IDS))
def test_the_defaults_load_under_every_env(env_id):
    assert load_config(None, [f"env.id={env_id}"]).env.id == env_id


@pytest.mark.parametrize("path", [None, *CONFIGS], ids=["defaults", *(p.name for p in CONFIGS)])
@pytest.mark.parametrize("name", HARNESS_NAMES)
def test_every_config_loads_under_every_harness(path, name):
    cfg = load_config(None if path is None else str(path), _harness(name))
    assert cfg.env.harness.name == name
    assert (cfg.sandbox.command_timeout_s < cfg.env.harness.step_timeout_s < cfg.rollout.max_episode_seconds
            < cfg.deadlines.gateway_request_s)


def test_a_command_harness_without_its_command_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"'env\.harness\.command' is empty.*tool-agent"):
        load_config(None, [f"env.id={HARNESS_ENV_ID}", "env.harness.name=command"])
    load_config(None, ["env.harness.name=command"])  # only the harness env runs it
