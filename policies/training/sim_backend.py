"""trainer.backend=sim: a trainer whose step costs `trainer.sim_step_s` of wall time, not compute.

For benchmarks of the pipeline around the trainer (`swerve bench async_vs_sync`): the shard's
real step runs (padding, GRPO loss, backward, optimizer, version, checkpoints, weight export)
over one scalar parameter, and the differentiable forward sleeps for the calibrated step time of
the model it stands in for, so the trainer neither competes for the CPU nor varies with it.
"""
from __future__ import annotations

import time
from typing import Optional

import torch

from configs.schema import TrainerConfig

PARAMETER = "sim.logit_shift"


class SimBackend:
    optimizer_is_sharded = False

    def __init__(self, cfg: TrainerConfig, model_path: str, rank: int, world_size: int):
        if world_size != 1:
            raise ValueError("trainer.backend=sim runs one shard; set trainer.num_shards=1")
        self.cfg = cfg
        self.shift = torch.nn.Parameter(torch.zeros(()))

    def parameters(self) -> list[torch.nn.Parameter]:
        return [self.shift]

    def sequence_logprobs(self, token_ids: torch.Tensor, attention_mask: torch.Tensor,
                          temperature: float) -> torch.Tensor:
        if torch.is_grad_enabled():
            # Only the differentiable pass is charged: it is where a real step spends its time.
            time.sleep(self.cfg.sim_step_s)
        # The real backends' shape: [B, T], entry 0 and padding 0 (policies/training/logprobs.py).
        return torch.nn.functional.pad((self.shift - 1.0) * attention_mask[:, 1:].float(), (1, 0))

    def data_parallel_group(self) -> Optional[object]:
        return None

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        return {PARAMETER: self.shift.detach().clone()}

    def load_hf_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if set(state) != {PARAMETER}:
            raise ValueError(f"a sim trainer loads only {PARAMETER!r}; got {sorted(state)[:5]} "
                             "(a checkpoint of another backend: resume it with that trainer.backend)")
        with torch.no_grad():
            self.shift.copy_(state[PARAMETER])

    def close(self) -> None:
        """Holds no process group or files: nothing to release."""
