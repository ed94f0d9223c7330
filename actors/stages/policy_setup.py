"""The one way a run gets its policy files: the tokenizer (built once per corpus) and the model.

It lives in actors/ because it joins the two sides that never import each other: the task
texts the tokenizer corpus should see come from envs/, the builders from policies/.
"""
from __future__ import annotations

from configs import Config
from envs.tasks.micro import corpus_texts
from policies.model import ensure_model
from policies.tokenizer import ensure_tokenizer


def ensure_policy(cfg: Config) -> tuple[str, str]:
    """(tokenizer path, model path), built into the cache on first use. The offline tokenizer
    learns the micro train tasks' text whatever tasks.source is: the embedded default model
    is sized for them, and a real checkpoint brings its own tokenizer (tokenizer.path)."""
    tokenizer_path = ensure_tokenizer(cfg.tokenizer, corpus_texts())
    return tokenizer_path, ensure_model(cfg.model, tokenizer_path)
