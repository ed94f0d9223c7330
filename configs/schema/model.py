"""The policy's model and tokenizer."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ModelConfig:
    # A Hugging Face model directory; empty builds the tiny Qwen3 model below (cached).
    path: str = ""
    cache_dir: str = "~/.cache/swerve"
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 384
    max_position_embeddings: int = 4096
    seed: int = 0


@dataclass
class TokenizerConfig:
    # A Hugging Face tokenizer directory; empty trains the offline byte-level BPE (cached).
    path: str = ""
    cache_dir: str = "~/.cache/swerve"
    vocab_size: int = 2048
