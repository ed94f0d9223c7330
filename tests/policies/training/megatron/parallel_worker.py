"""One rank of a world-size-2 megatron backend run (spawned by test_parallel.py).

usage: parallel_worker.py RANK WORLD PORT JOB [JOB ...], JOB = MODEL_DIR,TP,EP,BATCH_FILE,OUT_PREFIX
Runs the jobs one after the other in one process group (one start-up for all, and close()
must leave megatron ready for the next backend). Each job writes OUT_PREFIX{rank}.pt with
{logprobs, loss, grad_norm, hf_state, dp_size} after one GRPO forward/backward and the
backend's data-parallel gradient reduction (average).
"""
from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist


def main() -> None:
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        for job in sys.argv[4:]:
            model_dir, tp, ep, batch_file, out_prefix = job.split(",")
            run_job(rank, world, model_dir, int(tp), int(ep), batch_file, f"{out_prefix}{rank}.pt")
    finally:
        dist.destroy_process_group()


def run_job(rank, world, model_dir, tp, ep, batch_file, out_file) -> None:
    from configs.schema import TrainerConfig
    from policies.training.losses import grpo_loss
    from policies.training.megatron.backend import MegatronBackend
    from policies.training.megatron.model import MegatronOptions

    batch = torch.load(batch_file)
    backend = MegatronBackend(TrainerConfig(backend="megatron"), model_dir, rank, world,
                              options=MegatronOptions(tensor_parallel_size=tp, expert_parallel_size=ep))
    try:
        logprobs = backend.sequence_logprobs(batch["ids"], batch["mask"], batch["temperature"])
        loss, _ = grpo_loss(logprobs, batch["old"], batch["advantages"], batch["loss_mask"])
        loss.backward()
        # Every rank trains on the same batch here, so the DP average equals one copy.
        backend.all_reduce_grads(average=True)
        result = {
            "logprobs": logprobs.detach(), "loss": loss.item(),
            "grad_norm": backend.grad_norm().item(), "hf_state": backend.hf_state_dict(),
            "dp_size": dist.get_world_size(backend.data_parallel_group()),
        }
        if ep > 1:
            # EP ranks are data-parallel ranks: their batches may differ in shape (rank 1:
            # the first row cut to 8 tokens), and megatron's dispatcher still gets equal counts.
            ids, mask = batch["ids"], batch["mask"]
            if rank == 1:
                ids, mask = ids[:1, :8], mask[:1, :8]
            with torch.no_grad():
                result["uneven"] = backend.sequence_logprobs(ids, mask, batch["temperature"])
        torch.save(result, out_file)
    finally:
        backend.close()


if __name__ == "__main__":
    main()
