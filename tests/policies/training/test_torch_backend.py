import subprocess
import sys
import typing

import pytest
import torch

from configs.schema import TrainerBackend, TrainerConfig
from policies.training.logprobs import sequence_logprobs
from policies.training.megatron.backend import MegatronBackend
from policies.model import load_model
from policies.training.torch_backend import TorchBackend
from policies.training.trainer_backend import BACKENDS, backend_class, clip_grad_norm


def test_registry_holds_real_classes_for_every_configurable_backend():
    assert backend_class("torch") is TorchBackend and BACKENDS["megatron"] is MegatronBackend
    assert set(BACKENDS) == set(typing.get_args(TrainerBackend))
    with pytest.raises(ValueError, match="allowed: torch, megatron"):
        backend_class("jax")


@pytest.mark.slow
def test_the_registry_does_not_import_megatron_core():
    # megatron-core is imported by MegatronBackend's constructor: CPU installs may lack it.
    code = "import sys, policies.training.trainer_backend; assert 'megatron.core' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_interface_on_one_rank(model_path, model):
    backend = TorchBackend(TrainerConfig(), model_path, rank=0, world_size=1)
    assert backend.data_parallel_group() is None
    ids = torch.tensor([[1, 5, 9, 12], [1, 7, 0, 0]])
    attention = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    logprobs = backend.sequence_logprobs(ids, attention, 0.7)
    assert logprobs.shape == (2, 4) and logprobs.requires_grad
    with torch.no_grad():
        torch.testing.assert_close(logprobs.detach(), sequence_logprobs(model, ids, attention, 0.7))
    logprobs.sum().backward()
    assert all(p.grad is not None for p in backend.parameters())
    assert clip_grad_norm(backend, 1e9) > 0


def test_hf_state_dict_round_trip(model_path):
    backend = TorchBackend(TrainerConfig(), model_path, rank=0, world_size=1)
    state = backend.hf_state_dict()
    assert set(state) == set(load_model(model_path).state_dict())
    assert state["model.embed_tokens.weight"].data_ptr() != state["lm_head.weight"].data_ptr()
    changed = {k: v + 1.0 for k, v in state.items()}
    backend.load_hf_state_dict(changed)
    assert all(torch.equal(v, changed[k]) for k, v in backend.hf_state_dict().items())
    del changed["lm_head.weight"]  # tied to the embeddings: optional, as HF saves it
    backend.load_hf_state_dict(changed)
    with pytest.raises(KeyError, match="missing"):
        backend.load_hf_state_dict({k: v for k, v in state.items() if "layers.0." not in k})


def test_params_dtype(model_path):
    backend = TorchBackend(TrainerConfig(params_dtype="bfloat16"), model_path, rank=0, world_size=1)
    assert {p.dtype for p in backend.parameters()} == {torch.bfloat16}


def test_mixed_precision_keeps_fp32_parameters_and_gradients(model_path, model):
    backend = TorchBackend(TrainerConfig(mixed_precision="bf16"), model_path, rank=0, world_size=1)
    assert backend.bf16_autocast and not TorchBackend(TrainerConfig(), model_path, 0, 1).bf16_autocast
    ids = torch.tensor([[1, 5, 9, 12, 7, 3], [1, 7, 4, 0, 0, 0]])
    attention = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    logprobs = backend.sequence_logprobs(ids, attention, 1.0)
    with torch.no_grad():
        exact = sequence_logprobs(model, ids, attention, 1.0)
    gap = (logprobs.detach() - exact).abs().max().item()
    assert logprobs.dtype == torch.float32 and 0 < gap < 0.1, gap  # computed in bf16, close to fp32
    logprobs.sum().backward()
    assert {p.dtype for p in backend.parameters()} == {torch.float32}
    assert {p.grad.dtype for p in backend.parameters()} == {torch.float32}
