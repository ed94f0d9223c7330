"""The one way a run gets its policy files: the tokenizer (built once per corpus) and the model.

It lives in actors/ because it joins the two sides that never import each other: the texts the
tokenizer corpus should see come from envs/ (the tasks', and the agent harness's when the run
trains one), the builders from policies/.
"""
from __future__ import annotations

from typing import Optional

from configs import Config
from configs.loader import HARNESS_ENV_ID
from envs.harness_texts import harness_texts
from envs.tasks.micro import corpus_texts
from policies.corpus import HarnessVocabulary
from policies.model import ensure_model
from policies.tokenizer import ensure_tokenizer


def ensure_policy(cfg: Config) -> tuple[str, str]:
    """(tokenizer path, model path), built into the cache on first use."""
    tokenizer_path = ensure_run_tokenizer(cfg)
    return tokenizer_path, ensure_model(cfg.model, tokenizer_path)


def ensure_run_tokenizer(cfg: Config) -> str:
    """The run's tokenizer directory. The offline tokenizer learns the micro train tasks' text
    whatever tasks.source is (the embedded default model is sized for them), and, when env.id
    trains an agent harness, that harness's fixed texts; a real checkpoint brings its own
    tokenizer (tokenizer.path)."""
    return ensure_tokenizer(cfg.tokenizer, corpus_texts(), harness_vocabulary(cfg))


def harness_vocabulary(cfg: Config) -> Optional[HarnessVocabulary]:
    """What the run's harness sends in every request, or None when the run trains no harness
    (or the harness is a program swerve does not know)."""
    if cfg.env.id != HARNESS_ENV_ID or cfg.tokenizer.path:
        return None
    texts = harness_texts(cfg.env.harness)
    return HarnessVocabulary(texts=texts.texts, tools=texts.tools) if texts.texts else None
