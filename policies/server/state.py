"""What a CPU server holds: its model, tokenizer and scheduler, loaded from disk.

Also the weights an update brings (`load_safetensors_dir`, for /update_weights_from_disk).
"""
from __future__ import annotations

import glob
import logging
import os
import time
from typing import Dict, List

import torch

from policies.model import load_model
from policies.server.options import ServerConfig
from policies.server.scheduler import Scheduler
from policies.tokenizer import load_tokenizer

log = logging.getLogger("swerve.server")


class ServerState:
    def __init__(self, cfg: ServerConfig, model=None, tokenizer=None):
        self.cfg = cfg
        if cfg.torch_threads > 0:
            torch.set_num_threads(cfg.torch_threads)
        self.model = model if model is not None else load_model(cfg.model_path)
        self.tokenizer = tokenizer if tokenizer is not None else _load_tokenizer(cfg.model_path)
        self.scheduler = Scheduler(
            self.model, max_batch_size=cfg.max_batch_size,
            max_context_tokens=cfg.max_context_tokens, max_total_tokens=cfg.max_total_tokens,
            max_prefill_tokens=cfg.max_prefill_tokens, weight_version=cfg.weight_version,
            eos_token_ids=_eos_token_ids(self.model), prefix_cache_tokens=cfg.prefix_cache_tokens,
            priority_preemption_threshold=(cfg.priority_scheduling_preemption_threshold
                                           if cfg.enable_priority_scheduling else None),
        )
        config = self.model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", config.num_attention_heads)
        element_bytes = torch.finfo(self.model.dtype).bits // 8
        self.kv_bytes_per_token = 2 * config.num_hidden_layers * kv_heads * head_dim * element_bytes
        self.started = time.time()


def _load_tokenizer(path: str):
    try:
        return load_tokenizer(path)
    except Exception as error:  # a weights-only directory: no text, token ids still work
        log.warning("no tokenizer at %s (%s); responses carry empty text", path, error)
        return None


def _eos_token_ids(model) -> List[int]:
    ids: List[int] = []
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if value is None:
            continue
        ids.extend(value if isinstance(value, (list, tuple)) else [value])
    return sorted({int(i) for i in ids})


def load_safetensors_dir(model_path: str) -> Dict[str, torch.Tensor]:
    """Every tensor of a Hugging Face safetensors checkpoint directory (sharded or not)."""
    from safetensors.torch import load_file

    if not os.path.isdir(model_path):
        raise FileNotFoundError(f"no model directory at {model_path!r}")
    files = sorted(glob.glob(os.path.join(model_path, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {model_path!r}")
    tensors: Dict[str, torch.Tensor] = {}
    for path in files:
        tensors.update(load_file(path, device="cpu"))
    return tensors
