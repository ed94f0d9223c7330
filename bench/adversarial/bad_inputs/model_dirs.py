"""Missing or empty model and tokenizer directories, through the real loaders
(policies.model, policies.tokenizer): each must name the path and the config key to set."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from bench.adversarial.bad_inputs.probe import Probe, ProbeResult


def _refused(load: Callable[[], object]) -> ProbeResult:
    try:
        load()
    except FileNotFoundError as error:
        return ProbeResult(True, str(error))
    return ProbeResult(False, "loaded without an error")


def _model_missing(tmp_dir: Path) -> ProbeResult:
    from configs.schema import ModelConfig
    from policies.model import ensure_model

    return _refused(lambda: ensure_model(ModelConfig(path=str(tmp_dir / "no-model")), ""))


def _tokenizer_missing(tmp_dir: Path) -> ProbeResult:
    from configs.schema import TokenizerConfig
    from policies.tokenizer import ensure_tokenizer

    # No task texts: a tokenizer.path is used as it is, never trained.
    return _refused(lambda: ensure_tokenizer(TokenizerConfig(path=str(tmp_dir / "no-tokenizer")), ()))


def _model_empty(tmp_dir: Path) -> ProbeResult:
    from policies.model import load_model

    (tmp_dir / "empty-model").mkdir()
    return _refused(lambda: load_model(str(tmp_dir / "empty-model")))


def _tokenizer_empty(tmp_dir: Path) -> ProbeResult:
    from policies.tokenizer import load_tokenizer

    (tmp_dir / "empty-tokenizer").mkdir()
    return _refused(lambda: load_tokenizer(str(tmp_dir / "empty-tokenizer")))


PROBES = [
    Probe("model_dir_missing", "model_dir", _model_missing, "model.path: no model directory at"),
    Probe("tokenizer_dir_missing", "model_dir", _tokenizer_missing, "tokenizer.path: no tokenizer directory at"),
    Probe("model_dir_without_config", "model_dir", _model_empty, "has no config.json; set model.path"),
    Probe("tokenizer_dir_empty", "model_dir", _tokenizer_empty, "holds no tokenizer"),
]
