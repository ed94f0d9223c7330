"""Shared tiny tokenizer (vocab 512) and model (hidden 64, 2 layers), built once per session."""
from __future__ import annotations

import pytest
import torch

from configs.schema import ModelConfig, TokenizerConfig
from envs.tasks.micro import corpus_texts
from policies.model import ensure_model, load_model
from policies.tokenizer import ensure_tokenizer, load_tokenizer

TINY_VOCAB_SIZE = 512


def tiny_model_config(cache_dir: str, seed: int = 0) -> ModelConfig:
    return ModelConfig(
        cache_dir=cache_dir, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
        head_dim=16, intermediate_size=128, max_position_embeddings=512, seed=seed,
    )


@pytest.fixture(scope="session", name="tiny_model_config")
def _tiny_model_config_fixture():
    # A fixture, not an import: several test folders may each have a module named conftest.
    return tiny_model_config


@pytest.fixture(scope="session", autouse=True)
def _single_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("swerve-cache"))


@pytest.fixture(scope="session")
def task_texts() -> list[list[str]]:
    """What the run's tokenizer learns the tasks from (actors.stages.policy_setup hands the same across)."""
    return corpus_texts()


@pytest.fixture(scope="session")
def tokenizer_path(cache_dir, task_texts) -> str:
    return ensure_tokenizer(TokenizerConfig(cache_dir=cache_dir, vocab_size=TINY_VOCAB_SIZE), task_texts)


@pytest.fixture(scope="session")
def tokenizer(tokenizer_path):
    return load_tokenizer(tokenizer_path)


@pytest.fixture(scope="session")
def model_path(cache_dir, tokenizer_path) -> str:
    return ensure_model(tiny_model_config(cache_dir), tokenizer_path)


@pytest.fixture(scope="session")
def model(model_path):
    return load_model(model_path)
