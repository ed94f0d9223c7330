"""Typed configuration: dataclass schema (the home of defaults), YAML overrides, validation."""
from configs.loader import ConfigError, flat_config, load_config, to_yaml
from configs.schema import Config

__all__ = ["Config", "ConfigError", "flat_config", "load_config", "to_yaml"]
