"""TP=2 (dense) and EP=2 (MoE) at world size 2 over gloo on loopback, vs the HF model.

One pair of worker processes runs both configurations in turn (megatron's import dominates
the run time on 2 cores), so the results are computed once per module.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from policies.training.logprobs import sequence_logprobs
from policies.training.losses import grpo_loss
from policies.model import load_model
from policies.engines.process import free_port

pytestmark = pytest.mark.slow  # spawns process groups of megatron ranks

TOL = 1e-4
WORKER = os.path.join(os.path.dirname(__file__), "parallel_worker.py")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
# (name, moe, tensor_parallel_size, expert_parallel_size). Vocab 101 is odd: TP=2 pads it
# to 102 and must mask the padded logit.
CASES = [("dense_tp2", False, 2, 1), ("moe_ep2", True, 1, 2)]


def _reference(model_dir, out_dir):
    hf_model = load_model(model_dir)
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, hf_model.config.vocab_size, (2, 12), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    ids = ids * mask
    ref = sequence_logprobs(hf_model, ids, mask, 0.9)
    loss_mask = mask.clone()
    loss_mask[:, :2] = 0
    old = (ref.detach() + 0.05 * torch.randn(ref.shape, generator=gen)) * mask
    batch = {"ids": ids, "mask": mask, "temperature": 0.9, "old": old,
             "advantages": torch.tensor([1.0, -0.7]), "loss_mask": loss_mask}
    loss, _ = grpo_loss(ref, old, batch["advantages"], loss_mask)
    loss.backward()
    norm = torch.sqrt(sum(p.grad.double().pow(2).sum() for p in hf_model.parameters() if p.grad is not None))
    batch_file = os.path.join(out_dir, "batch.pt")
    torch.save(batch, batch_file)
    return {"logprobs": ref.detach(), "loss": loss.item(), "grad_norm": norm.item(),
            "batch_file": batch_file}


@pytest.fixture(scope="module")
def world2(make_checkpoint, tmp_path_factory):
    jobs, refs = [], {}
    for name, moe, tp, ep in CASES:
        model_dir = make_checkpoint("moe" if moe else "dense", moe=moe)
        out_dir = str(tmp_path_factory.mktemp(name))
        refs[name] = _reference(model_dir, out_dir)
        refs[name]["model_dir"] = model_dir
        refs[name]["prefix"] = os.path.join(out_dir, "rank")
        jobs.append(",".join([model_dir, str(tp), str(ep), refs[name]["batch_file"], refs[name]["prefix"]]))
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    port = free_port()
    procs = [subprocess.Popen([sys.executable, WORKER, str(r), "2", str(port), *jobs],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=180)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for r, proc in enumerate(procs):
        assert proc.returncode == 0, f"rank {r} failed:\n{logs[r][-4000:]}"
    return {name: (refs[name], [torch.load(f"{refs[name]['prefix']}{r}.pt") for r in range(2)])
            for name, *_ in CASES}


@pytest.mark.parametrize("name,moe,tp,ep", CASES)
def test_world2_matches_single_process_hf(world2, name, moe, tp, ep):
    ref, results = world2[name]
    original = load_file(os.path.join(ref["model_dir"], "model.safetensors"))
    for r, result in enumerate(results):
        # Every rank (both TP ranks; both EP ranks) returns the full [B, T] log-probs.
        assert (result["logprobs"] - ref["logprobs"]).abs().max().item() < TOL, f"rank {r}"
        assert abs(result["loss"] - ref["loss"]) < TOL
        # TP: shards' norms combined; EP: dense grads averaged over DP=2, expert grads hold
        # both ranks' tokens and are scaled alike.
        assert abs(result["grad_norm"] - ref["grad_norm"]) < TOL * max(1.0, ref["grad_norm"]), \
            (r, result["grad_norm"], ref["grad_norm"])
        assert result["dp_size"] == world_dp(tp)
        if ep > 1:
            expected = ref["logprobs"] if r == 0 else ref["logprobs"][:1, :8]
            assert result["uneven"].shape == expected.shape
            assert (result["uneven"] - expected).abs().max().item() < TOL
        state = result["hf_state"]
        assert sorted(state) == sorted(original)
        for key, tensor in original.items():
            assert torch.equal(state[key], tensor), (r, key)


def world_dp(tp: int) -> int:
    return 2 // tp


