"""Build a validated `Config` from the dataclass defaults, one YAML file and `key=value` overrides.

omegaconf and yaml are imported by the functions that use them: `configs` is imported by every
process that only receives a config (an episode actor and its sandbox actor per concurrent episode),
which loads none and would pay those imports' megabytes once per process.
"""
from __future__ import annotations

import difflib
import typing
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from configs.schema import Config

if TYPE_CHECKING:
    from omegaconf.errors import ValidationError

# The agent-harness env, whose timeouts must nest (_check_harness_timeouts).
HARNESS_ENV_ID = "swerve/Harness-v0"

# A YAML file's top-level `base: other.yaml` applies that file first.
BASE_KEY = "base"


class ConfigError(ValueError):
    """A config that cannot run; the message names the key and what is allowed."""


def all_keys(node=Config, prefix: str = "") -> list[str]:
    keys = []
    for f in fields(node):
        name = f"{prefix}{f.name}"
        sub = f.default_factory() if callable(f.default_factory) else f.default  # type: ignore[misc]
        if is_dataclass(sub):
            keys.extend(all_keys(type(sub), name + "."))
        else:
            keys.append(name)
    return keys


def flat_config(node, prefix: str = "") -> dict:
    """Every leaf of a config (a dataclass tree) by dotted key (a free-form mapping such as
    env.kwargs is one leaf)."""
    flat: dict = {}
    for f in fields(node):
        value = getattr(node, f.name)
        if is_dataclass(value):
            flat.update(flat_config(value, f"{prefix}{f.name}."))
        else:
            flat[f"{prefix}{f.name}"] = value
    return flat


def _leaf_type(key: str):
    """The annotated type of a leaf key ("trainer.betas[0]" is an element of trainer.betas)."""
    node, hint = Config, None
    for name in key.split("[")[0].split("."):
        hints = typing.get_type_hints(node) if node is not None else {}
        if name not in hints:
            return None  # inside a free-form mapping (env.kwargs): no declared type
        hint = hints[name]
        node = hint if is_dataclass(hint) else None
    if "[" in key:
        args = typing.get_args(hint)
        return args[-1] if args else hint
    return hint


def _describe(hint) -> str:
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    if hint in names:
        return names[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return f"a list of {_describe(args[0]).split(' ', 1)[-1]}s" if args else "a list"
    if origin is dict:
        return "a mapping of names to values"
    return "the type configs/schema/ declares" if hint is None else str(hint)


def _type_error(err: ValidationError) -> ConfigError:
    from omegaconf import Node, OmegaConf

    key = str(err.full_key)
    value = err.value
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value)
    elif isinstance(value, Node):
        value = value._value()
    hint = _leaf_type(key)
    # Keys with a fixed set of values (engine.backend, rollout.mode, ...) are typed as a Literal in
    # configs/schema/, so a typo or a not-yet-built backend fails at load time, naming what exists.
    if typing.get_origin(hint) is typing.Literal:
        return ConfigError(f"config key '{key}' is '{value}'; allowed: {', '.join(map(str, typing.get_args(hint)))}")
    shown = "null" if value is None else f"{value!r} ({type(value).__name__})"
    return ConfigError(f"config key '{key}' is {shown}; expected {_describe(_leaf_type(key))}")


def _unknown_key_error(key: str) -> ConfigError:
    near = difflib.get_close_matches(key, all_keys(), n=1, cutoff=0.5)
    hint = f"; did you mean '{near[0]}'?" if near else ""
    return ConfigError(f"unknown config key '{key}'{hint}")


def _yaml_layers(path: str, seen: tuple = ()) -> list:
    """The file's overrides, after those of the file its top-level `base:` names (relative to it),
    so a recipe states only how it differs from another."""
    import yaml
    from omegaconf import DictConfig, OmegaConf

    if not Path(path).is_file():
        raise ConfigError(f"config file '{path}' does not exist (pass --config PATH to a YAML file)")
    resolved = str(Path(path).resolve())
    if resolved in seen:
        raise ConfigError(f"config file '{path}' names itself as a base (through 'base:'): remove the cycle")
    try:
        layer = OmegaConf.load(path)
    except yaml.YAMLError as err:
        raise ConfigError(f"config file '{path}' is not valid YAML ({err}); fix the syntax at the line named") from err
    if not isinstance(layer, DictConfig):
        raise ConfigError(f"config file '{path}' holds a {type(layer).__name__}, not a mapping of sections "
                          "(e.g. 'engine:\n  num_engines: 2')")
    if BASE_KEY not in layer:
        return [layer]
    base = layer.pop(BASE_KEY)
    if not isinstance(base, str):
        raise ConfigError(f"config file '{path}': '{BASE_KEY}' must name a YAML file (e.g. base: default.yaml)")
    return _yaml_layers(str(Path(path).parent / base), (*seen, resolved)) + [layer]


def load_config(path: str | None = None, overrides: Iterable[str] = ()) -> Config:
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    base = OmegaConf.structured(Config)
    layers = _yaml_layers(path) if path else []
    dotlist = list(overrides)
    for item in dotlist:
        if "=" not in item:
            raise ConfigError(f"override '{item}' is not key=value (e.g. trainer.total_steps=3)")
    layers.append(OmegaConf.from_dotlist(dotlist))
    merged = base
    for layer in layers:
        _check_keys(layer)
        try:
            merged = OmegaConf.merge(merged, layer)
        except (ConfigKeyError, ConfigAttributeError) as err:
            raise _unknown_key_error(str(err.full_key)) from err
        except ValidationError as err:
            raise _type_error(err) from err
    cfg: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    validate(cfg)
    return cfg


def _check_keys(layer, prefix: str = "") -> None:
    from omegaconf import OmegaConf

    known = set(all_keys())
    for key, value in layer.items():
        full = f"{prefix}{key}"
        # env.kwargs is a free-form dict handed to the chosen environment.
        if full == "env.kwargs":
            continue
        if OmegaConf.is_dict(value):
            if not any(k.startswith(full + ".") for k in known):
                raise _unknown_key_error(full)
            _check_keys(value, full + ".")
        elif any(k.startswith(full + ".") for k in known):
            example = next(k for k in all_keys() if k.startswith(full + "."))  # the first, as the schema lists them
            raise ConfigError(f"config key '{full}' is a section, not a value ({value!r}); "
                              f"set its keys instead, e.g. {example}=...")
        elif full not in known:
            raise _unknown_key_error(full)


def validate(cfg: Config) -> None:
    # key -> (value, the smallest allowed): counts start at 1; cadences and rates at 0 (a cadence of
    # 0 is off).
    lower_bounds = {
        "engine.num_engines": (cfg.engine.num_engines, 1),
        "engine.max_batch_size": (cfg.engine.max_batch_size, 1),
        "trainer.num_shards": (cfg.trainer.num_shards, 1),
        "trainer.total_steps": (cfg.trainer.total_steps, 1),
        "rollout.num_episode_actors": (cfg.rollout.num_episode_actors, 1),
        "rollout.group_size": (cfg.rollout.group_size, 1),
        "rollout.groups_per_batch": (cfg.rollout.groups_per_batch, 1),
        "rollout.max_turns": (cfg.rollout.max_turns, 1),
        "rollout.max_tokens_per_turn": (cfg.rollout.max_tokens_per_turn, 1),
        "rollout.pass_rate_window": (cfg.rollout.pass_rate_window, 1),
        "trainer.ppo_epochs": (cfg.trainer.ppo_epochs, 1),
        "trainer.minibatches": (cfg.trainer.minibatches, 1),
        "run.plot_every_s": (cfg.run.plot_every_s, 0),
        "trainer.checkpoint_every_s": (cfg.trainer.checkpoint_every_s, 0),
        "trainer.checkpoint_interval": (cfg.trainer.checkpoint_interval, 0),
        "trainer.lr": (cfg.trainer.lr, 0),
        "trainer.kl_coef": (cfg.trainer.kl_coef, 0),
        "trainer.lr_warmup_steps": (cfg.trainer.lr_warmup_steps, 0),
        "eval.max_turns": (cfg.eval.max_turns, 0),
    }
    for key, (value, minimum) in lower_bounds.items():
        if value < minimum:
            raise ConfigError(f"config key '{key}' is {value}; it must be at least {minimum} (e.g. {key}={minimum})")
    if cfg.rollout.max_staleness < 0:
        raise ConfigError(f"config key 'rollout.max_staleness' is {cfg.rollout.max_staleness}; it must be >= 0 "
                          "(0 trains only on-policy samples, e.g. rollout.max_staleness=1)")
    if cfg.rollout.max_total_tokens < cfg.rollout.max_tokens_per_turn:
        raise ConfigError(
            "config key 'rollout.max_total_tokens' "
            f"({cfg.rollout.max_total_tokens}) must be >= rollout.max_tokens_per_turn "
            f"({cfg.rollout.max_tokens_per_turn}): one turn cannot exceed the whole trajectory; raise "
            "rollout.max_total_tokens or lower rollout.max_tokens_per_turn"
        )
    if cfg.engine.max_context_tokens < cfg.rollout.max_total_tokens:
        raise ConfigError(
            f"config key 'engine.max_context_tokens' ({cfg.engine.max_context_tokens}) must be >= "
            f"rollout.max_total_tokens ({cfg.rollout.max_total_tokens}); raise engine.max_context_tokens "
            "or lower rollout.max_total_tokens"
        )
    if not 0.0 <= cfg.rollout.explore_fraction <= 1.0:
        raise ConfigError(f"config key 'rollout.explore_fraction' is {cfg.rollout.explore_fraction}; allowed: [0, 1]")
    if not 0.0 <= cfg.pipeline.recovery_rate <= 1.0:
        raise ConfigError(f"config key 'pipeline.recovery_rate' is {cfg.pipeline.recovery_rate}; allowed: [0, 1]")
    if cfg.rollout.pass_rate_half_life_versions <= 0:
        raise ConfigError("config key 'rollout.pass_rate_half_life_versions' is "
                          f"{cfg.rollout.pass_rate_half_life_versions}; it must be > 0 (e.g. 4)")
    if not 0.0 < cfg.rollout.top_p <= 1.0:
        raise ConfigError(f"config key 'rollout.top_p' is {cfg.rollout.top_p}; allowed: (0, 1]")
    if cfg.rollout.temperature < 0:
        raise ConfigError(f"config key 'rollout.temperature' is {cfg.rollout.temperature}; it must be >= 0")
    if cfg.trainer.backend == "megatron" and cfg.trainer.mixed_precision != "off":
        raise ConfigError(f"config key 'trainer.mixed_precision' is {cfg.trainer.mixed_precision!r}, which the torch "
                          "backend alone reads; the megatron backend computes in trainer.params_dtype "
                          "(e.g. trainer.params_dtype=bfloat16 trainer.mixed_precision=off)")
    if cfg.env.id == HARNESS_ENV_ID:
        _check_harness_timeouts(cfg)
        if cfg.env.harness.name == "command" and not cfg.env.harness.command.strip():
            raise ConfigError("config key 'env.harness.command' is empty, and env.harness.name=command runs it: name "
                              "the program (e.g. env.harness.command='python3 /opt/agent/run.py'), or pick a "
                              "built-in harness (env.harness.name=mini-swe-agent or tool-agent)")
    for key in ("faults.sandbox_kill_rate", "faults.llm_error_rate", "faults.sandbox_start_fail_rate",
                "faults.engine_kill_rate", "faults.grader_crash_rate"):
        section, name = key.split(".")
        rate = getattr(cfg.faults, name)
        if not 0.0 <= rate <= 1.0:
            raise ConfigError(f"config key '{key}' is {rate}; allowed: [0, 1]")


def _check_harness_timeouts(cfg: Config) -> None:
    """An agent harness's limits nest, so the inner one always ends a hang first: a command
    ends before the harness gives up on a model call, a call before the episode's cap, the
    episode before its request would die in the gateway."""
    chain = [("sandbox.command_timeout_s", cfg.sandbox.command_timeout_s),
             ("env.harness.step_timeout_s", cfg.env.harness.step_timeout_s),
             ("rollout.max_episode_seconds", cfg.rollout.max_episode_seconds),
             ("deadlines.gateway_request_s", cfg.deadlines.gateway_request_s)]
    for (inner, inner_s), (outer, outer_s) in zip(chain, chain[1:]):
        if not inner_s < outer_s:
            raise ConfigError(f"config key '{inner}' ({inner_s:g}) must be < {outer} ({outer_s:g}) under "
                              f"{HARNESS_ENV_ID}: timeouts nest {' < '.join(key for key, _ in chain)}")


def to_yaml(cfg: Config) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
