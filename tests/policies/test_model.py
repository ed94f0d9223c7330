import json
import os

import pytest
import torch
from safetensors.torch import load_file

from configs.schema import ModelConfig
from policies.model import ensure_model, load_model
from policies.tokenizer import load_tokenizer


def test_explicit_path_is_returned(tmp_path):
    assert ensure_model(ModelConfig(path=str(tmp_path)), "unused") == str(tmp_path)


def test_missing_path_names_the_key(tmp_path):
    with pytest.raises(FileNotFoundError, match="model.path"):
        ensure_model(ModelConfig(path=str(tmp_path / "nope")), "unused")


def test_checkpoint_is_complete(model_path, tokenizer):
    files = set(os.listdir(model_path))
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    with open(os.path.join(model_path, "config.json")) as handle:
        config = json.load(handle)
    assert config["model_type"] == "qwen3"
    assert config["vocab_size"] == len(tokenizer)
    assert config["tie_word_embeddings"] is True
    assert config["eos_token_id"] == tokenizer.eos_token_id
    assert config["pad_token_id"] == tokenizer.pad_token_id
    assert load_tokenizer(model_path).encode("ls -la") == tokenizer.encode("ls -la")


def test_loaded_model_shape_and_mode(model):
    assert not model.training
    assert model.dtype == torch.float32
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    logits = model(torch.tensor([[1, 5, 9]])).logits
    assert logits.shape == (1, 3, model.config.vocab_size)


def test_init_is_deterministic_per_seed(tmp_path, model_path, tokenizer_path, tiny_model_config):
    again = ensure_model(tiny_model_config(str(tmp_path / "a")), tokenizer_path)
    other = ensure_model(tiny_model_config(str(tmp_path / "b"), seed=1), tokenizer_path)
    assert os.path.basename(again) == os.path.basename(model_path)
    reference = load_file(os.path.join(model_path, "model.safetensors"))
    same = load_file(os.path.join(again, "model.safetensors"))
    different = load_file(os.path.join(other, "model.safetensors"))
    assert all(torch.equal(reference[name], same[name]) for name in reference)
    assert not all(torch.equal(reference[name], different[name]) for name in reference)


def test_cached_second_call(tmp_path, tokenizer_path, tiny_model_config):
    cfg = tiny_model_config(str(tmp_path))
    path = ensure_model(cfg, tokenizer_path)
    mtime = os.path.getmtime(os.path.join(path, "model.safetensors"))
    assert ensure_model(cfg, tokenizer_path) == path
    assert os.path.getmtime(os.path.join(path, "model.safetensors")) == mtime


def test_reload_gives_identical_logits(model_path, model):
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, load_model(model_path)(ids).logits)


def test_default_config_sizes_build(tmp_path, task_texts):
    from configs.schema import TokenizerConfig
    from policies.tokenizer import ensure_tokenizer

    tokenizer_path = ensure_tokenizer(TokenizerConfig(cache_dir=str(tmp_path)), task_texts)
    model = load_model(ensure_model(ModelConfig(cache_dir=str(tmp_path)), tokenizer_path))
    assert model.config.vocab_size == TokenizerConfig().vocab_size
    assert model.config.hidden_size == ModelConfig().hidden_size
