"""The trainer's device: the one GPU Ray gave it, the CPU without one, never a guess on a multi-GPU view."""
import pytest
import torch

from policies import device


def test_cpu_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device.role_device() == torch.device("cpu")


def test_a_view_of_several_gpus_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    with pytest.raises(RuntimeError, match="sees 4 GPUs.*CUDA_VISIBLE_DEVICES=0,1,2,3"):
        device.role_device()


def test_the_one_visible_gpu_is_made_current(monkeypatch):
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert device.role_device() == torch.device("cuda", 0) and chosen == [0]
