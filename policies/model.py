"""The policy model: a real checkpoint, or a tiny randomly initialised Qwen3 built offline.

The built model is saved as a complete Hugging Face checkpoint (weights, config and
tokenizer in one directory), so engines and trainers load it exactly like a real one.
"""
from __future__ import annotations

import hashlib
import os

import torch
import transformers
from transformers import AutoModelForCausalLM, PreTrainedModel, Qwen3Config, Qwen3ForCausalLM

from configs.schema import ModelConfig
from policies.cache_dir import build_once, content_hash
from policies.tokenizer import load_tokenizer


def ensure_model(cfg: ModelConfig, tokenizer_path: str) -> str:
    """Return a checkpoint directory, building and caching the tiny model if needed."""
    if cfg.path:
        if not os.path.isdir(cfg.path):
            raise FileNotFoundError(
                f"model.path: no model directory at {cfg.path!r}; set model.path to a Hugging Face "
                "checkpoint directory, or leave it empty to build the tiny test model")
        return cfg.path
    key = content_hash({
        "kind": "qwen3_random_init",
        "sizes": _size_fields(cfg),
        "seed": cfg.seed,
        "tokenizer_sha256": _tokenizer_digest(tokenizer_path),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
    })
    final_dir = os.path.join(os.path.expanduser(cfg.cache_dir), "models", key)
    return build_once(final_dir, lambda tmp_dir: _build(cfg, tokenizer_path, tmp_dir))


def load_model(path: str, dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    # Checked here, not left to from_pretrained: it would take a missing directory for a Hub
    # repository id and fail with a message about the network.
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no model directory at {path!r}; set model.path (the server: --model-path) "
                                "to a Hugging Face checkpoint directory")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(f"{path!r} is not a model directory: it has no config.json; set model.path "
                                "(the server: --model-path) to a Hugging Face checkpoint directory")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    model.eval()
    return model


def _size_fields(cfg: ModelConfig) -> dict:
    return {
        "hidden_size": cfg.hidden_size,
        "num_layers": cfg.num_layers,
        "num_heads": cfg.num_heads,
        "num_kv_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.intermediate_size,
        "max_position_embeddings": cfg.max_position_embeddings,
    }


def _tokenizer_digest(tokenizer_path: str) -> str:
    # The vocabulary fixes the embedding shape and the special-token ids of the model.
    digest = hashlib.sha256()
    for name in sorted(os.listdir(tokenizer_path)):
        full = os.path.join(tokenizer_path, name)
        if os.path.isfile(full):
            digest.update(name.encode())
            with open(full, "rb") as handle:
                digest.update(handle.read())
    return digest.hexdigest()


def _build(cfg: ModelConfig, tokenizer_path: str, out_dir: str) -> None:
    tokenizer = load_tokenizer(tokenizer_path)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        # Qwen uses the pad token as bos; the chat template never emits a bos.
        bos_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    torch.manual_seed(cfg.seed)
    model = Qwen3ForCausalLM(config).to(torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
