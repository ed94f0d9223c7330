"""Lets megatron-core's GPTModel run forward/backward on CPU (gloo), for tests and CPU runs.

Written against megatron-core 0.16.1 (torch 2.13, no transformer_engine, no apex). With CUDA
available `apply()` does nothing, so the same code path runs unchanged on GPUs.

megatron-core builds a GPTModel on CPU with `use_cpu_initialization=True`, but its forward
pass has hard-coded CUDA calls. Each patch below names the place it exists for:

1. `torch.cuda.current_device()` used as a tensor device in
   - `models/common/embeddings/rotary_pos_embedding.py`: `RotaryEmbedding.get_emb` moves
     `inv_freq` to `torch.cuda.current_device()` on the first forward pass (and
     `MultimodalRotaryEmbedding.__init__` creates it there);
   - `utils.py`: `GlobalMemoryBuffer.get_tensor` (the attention scores buffer that
     `DotProductAttention` asks for, and tensor-parallel gather buffers) allocates on it;
   - `transformer/moe/router.py`: `TopKRouter.gating` moves the router weight to it on
     every forward pass;
   - `tensor_parallel/mappings.py`: the all-gather helpers (the allgather MoE token
     dispatcher under expert parallelism, logits gathers) allocate their output on it;
   - `transformer/attention.py` (inference KV cache), `transformer/dot_product_attention.py`
     (softmax offsets) and `transformer/moe/experts.py` (FP8 padding buffers) do the same
     in paths we do not use today; patched alike so they fail no differently.
   Without CUDA that call raises. We give exactly these modules a `torch` whose
   `cuda.current_device()` answers the CPU device; everything else is the real torch. The rest of the process
   (transformers, our torch backend) still sees the untouched `torch.cuda`.
2. The dropout RNG tracker (`tensor_parallel/random.py`): the training tracker saves and
   restores CUDA RNG states in `fork()`, which needs CUDA. We (re)initialise it in its
   inference mode (`inference_rng_tracker=True`), whose `fork()` is a null context, so
   dropout (which we configure to 0 anyway) uses the CPU generator.
3. `transformer/moe/moe_utils.py` imports TE's fused kernels (`te_general_gemm`,
   `fused_permute`, ...) only when transformer_engine is installed, and otherwise leaves the
   names undefined. `router_gating_linear` (the MoE router's forward) reads
   `if te_general_gemm is not None and ...` unguarded, which raises NameError without TE.
   We define the missing names as None, which selects the plain torch paths (the other
   uses are already guarded by `if not HAVE_TE or fused_x is None`).
4. `transformer/utils.py:get_default_causal_mask` allocates with `device="cuda"` when the
   attention mask is None. Not patched: the backend always passes an explicit mask.
"""
from __future__ import annotations

import importlib
import types

import torch

WRITTEN_FOR_MEGATRON_CORE = "0.16"

# Modules whose `torch.cuda.current_device()` is used as an allocation device (patch 1).
_CURRENT_DEVICE_MODULES = (
    "megatron.core.models.common.embeddings.rotary_pos_embedding",
    "megatron.core.utils",
    "megatron.core.transformer.attention",
    "megatron.core.transformer.dot_product_attention",
    "megatron.core.transformer.moe.router",
    "megatron.core.transformer.moe.experts",
    "megatron.core.tensor_parallel.mappings",
)

# Names moe_utils imports from megatron.core.extensions.transformer_engine only when TE is
# present (patch 3).
_MOE_UTILS_TE_NAMES = (
    "fused_compute_score_for_moe_aux_loss",
    "fused_moe_aux_loss",
    "fused_permute",
    "fused_permute_with_probs",
    "fused_sort_chunks_by_index",
    "fused_sort_chunks_by_index_with_probs",
    "fused_topk_with_score_function",
    "fused_unpermute",
    "te_general_gemm",
)


class _CpuCuda:
    """`torch.cuda` with `current_device()` answering the CPU device."""

    def __getattr__(self, name):
        return getattr(torch.cuda, name)

    @staticmethod
    def current_device():
        return torch.device("cpu")


class _TorchWithCpuCuda(types.ModuleType):
    """The real `torch` module except that `.cuda` is `_CpuCuda`."""

    def __init__(self):
        super().__init__("torch")
        self.cuda = _CpuCuda()

    def __getattr__(self, name):
        return getattr(torch, name)


_TORCH_PROXY = _TorchWithCpuCuda()


def needed() -> bool:
    return not torch.cuda.is_available()


def apply() -> None:
    """Install the patches; idempotent, and a no-op when CUDA is available."""
    if not needed():
        return
    _check_version()
    for name in _CURRENT_DEVICE_MODULES:
        module = importlib.import_module(name)
        if module.__dict__.get("torch") is not _TORCH_PROXY:
            module.torch = _TORCH_PROXY
    moe_utils = importlib.import_module("megatron.core.transformer.moe.moe_utils")
    if not getattr(moe_utils, "HAVE_TE", False):
        for name in _MOE_UTILS_TE_NAMES:
            if name not in moe_utils.__dict__:
                setattr(moe_utils, name, None)
    reset_rng_tracker()


def reset_rng_tracker() -> None:
    """Put megatron's dropout RNG tracker in its no-CUDA (inference) mode (patch 2).

    Call again after anything that re-creates the tracker (`model_parallel_cuda_manual_seed`).
    """
    if not needed():
        return
    from megatron.core.tensor_parallel import random as mrandom

    tracker = mrandom._CUDA_RNG_STATE_TRACKER
    if tracker is not None and getattr(tracker, "is_inference_rng_tracker", False):
        return
    mrandom.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)


def _check_version() -> None:
    import megatron.core

    version = getattr(megatron.core, "__version__", "")
    if not version.startswith(WRITTEN_FOR_MEGATRON_CORE + "."):
        import warnings

        warnings.warn(
            f"policies.training.megatron.cpu_shim was written for megatron-core {WRITTEN_FOR_MEGATRON_CORE}.x,"
            f" found {version}; the CPU patches may be stale",
            stacklevel=3,
        )
