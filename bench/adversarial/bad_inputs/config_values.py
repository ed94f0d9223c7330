"""Invalid configs, through the real loader (configs.load_config): each must raise a
ConfigError naming the key, the bad value and what is allowed."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from bench.adversarial.bad_inputs.probe import Probe, ProbeResult
from configs import ConfigError, load_config


def _config_probe(overrides: Sequence[str], yaml_text: str = ""):
    def run(tmp_dir: Path) -> ProbeResult:
        path = None
        if yaml_text:
            path = tmp_dir / "bad.yaml"
            path.write_text(yaml_text)
        try:
            load_config(str(path) if path else None, overrides)
        except ConfigError as error:
            return ProbeResult(True, str(error))
        return ProbeResult(False, f"accepted: {list(overrides)} {yaml_text!r}")
    return run


def _config(name: str, overrides: Sequence[str], expected: str, yaml_text: str = "") -> Probe:
    return Probe(name, "config", _config_probe(overrides, yaml_text), expected)


PROBES = [
    _config("config_wrong_type", ["trainer.total_steps=many"],
            "config key 'trainer.total_steps' is 'many' (str); expected an integer"),
    _config("config_unknown_key", ["rollout.max_stalenes=2"], "did you mean 'rollout.max_staleness'?"),
    _config("config_total_tokens_below_turn_tokens",
            ["rollout.max_total_tokens=512", "rollout.max_tokens_per_turn=1024"],
            "must be >= rollout.max_tokens_per_turn (1024)"),
    _config("config_zero_engines", ["engine.num_engines=0"], "'engine.num_engines' is 0; it must be at least 1"),
    _config("config_negative_staleness", ["rollout.max_staleness=-1"], "'rollout.max_staleness' is -1; it must be >= 0"),
    _config("config_unknown_backend", ["sandbox.backend=vm"], "allowed: local, docker, e2b"),
    _config("config_section_set_to_a_value", ["engine=3"], "'engine' is a section, not a value"),
    _config("config_yaml_syntax", [], "is not valid YAML", yaml_text="engine: {num_engines: 2\n"),
    _config("config_yaml_unknown_key", [], "did you mean 'engine.num_engines'?", yaml_text="engine:\n  num_engine: 3\n"),
]
