"""Hugging Face model directories on disk, written durably and atomically."""
from __future__ import annotations

import os
import shutil
from typing import Callable

MODEL = "model.safetensors"
# Files of a model directory that are weights (everything else: config, tokenizer, templates).
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".index.json", ".gguf")


def fsync_file(path: str) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_safetensors(state: dict) -> Callable[[str], None]:
    def write(path: str) -> None:
        from safetensors.torch import save_file

        save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, path, metadata={"format": "pt"})
    return write


def write_hf_dir(out_dir: str, state: dict, sources: str | list[str], tied_embeddings: bool = False) -> str:
    """Write a directory `AutoModelForCausalLM.from_pretrained` loads: `state` as
    model.safetensors plus every non-weight file of the source directories (config, generation
    config, tokenizer, chat template; a later source wins). Replaces out_dir atomically
    (temp dir + rename)."""
    out_dir = os.path.abspath(out_dir)
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".tmp-{os.path.basename(out_dir)}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for source in [sources] if isinstance(sources, str) else sources:
        for name in os.listdir(source):
            src = os.path.join(source, name)
            if os.path.isfile(src) and not name.endswith(_WEIGHT_SUFFIXES):
                shutil.copyfile(src, os.path.join(tmp, name))
    if tied_embeddings:  # from_pretrained re-ties lm_head to the embeddings, as HF saves it
        state = {k: v for k, v in state.items() if k != "lm_head.weight"}
    write_safetensors(state)(os.path.join(tmp, MODEL))
    for name in os.listdir(tmp):
        fsync_file(os.path.join(tmp, name))
    fsync_dir(tmp)
    old = None
    if os.path.exists(out_dir):
        old = f"{tmp}.old"
        os.rename(out_dir, old)
    os.rename(tmp, out_dir)
    fsync_dir(parent)
    if old:
        shutil.rmtree(old, ignore_errors=True)
    return out_dir
