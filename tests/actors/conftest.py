import pytest

from configs import load_config
from policies.model import ensure_model
from policies.tokenizer import ensure_tokenizer


@pytest.fixture(scope="session")
def tiny_cfg(swerve_cache):
    return load_config("tests/smoke.yaml", [f"model.cache_dir={swerve_cache}", f"tokenizer.cache_dir={swerve_cache}"])


@pytest.fixture(scope="session")
def tokenizer_path(tiny_cfg):
    return ensure_tokenizer(tiny_cfg.tokenizer)


@pytest.fixture(scope="session")
def model_path(tiny_cfg, tokenizer_path):
    return ensure_model(tiny_cfg.model, tokenizer_path)
