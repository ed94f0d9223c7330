"""The RL trainer shards and the SFT stage."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Literal


# Trainer backends (policies/training/trainer_backend.py BACKENDS holds each one's class): "torch" the HF
# model, data parallel; "megatron" megatron-core (TP/EP); "sim" one scalar parameter whose step
# takes trainer.sim_step_s (benchmarks).
TrainerBackend = Literal["torch", "megatron", "sim"]
# How per-token losses become the batch loss (policies.training.losses.grpo_loss).
LossAggregation = Literal["token_mean", "seq_mean"]
# Matmuls in bf16 under autocast where it pays (policies/training/precision.py).
MixedPrecision = Literal["auto", "off", "bf16"]
LrSchedule = Literal["constant", "cosine"]


@dataclass
class TrainerConfig:
    backend: TrainerBackend = "torch"
    # backend sim: seconds one train step takes (the forward and backward of the model it stands in for).
    sim_step_s: float = 1.0
    num_shards: int = 1
    total_steps: int = 3
    lr: float = 1e-5
    weight_decay: float = 0.0
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    max_grad_norm: float = 1.0
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.28
    kl_coef: float = 0.0
    # How per-token losses become the batch loss (policies.training.losses): "token_mean" (every token
    # weighs the same; long failing trajectories then push shared tokens down) | "seq_mean"
    # (every trajectory weighs the same).
    loss_aggregation: LossAggregation = "token_mean"
    # Passes over each batch, and optimizer steps per pass (the batch split into this many
    # minibatches). With 1 x 1 the PPO ratio is exactly 1 and clipping never acts; more steps reuse
    # each expensive rollout, clipped against the log-probs from before the first step.
    ppo_epochs: int = 1
    minibatches: int = 1
    # Linear learning-rate warm-up over the first this many updates (policy versions); 0: none.
    lr_warmup_steps: int = 0
    torch_threads: int = 1
    # Rendezvous address of rank 0; loopback keeps a one-node run off the network.
    master_addr: str = "127.0.0.1"
    # 0 picks a free port for the rendezvous.
    master_port: int = 0
    # Truncated importance weight cap: exp(proximal - behavior) is clamped to at most this.
    tis_cap: float = 2.0
    # dtype the trainer holds parameters in and computes with: "float32" | "bfloat16" | "float16".
    params_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    # torch backend only: matmuls in bf16 under autocast, parameters, gradients and optimizer state
    # in params_dtype; "auto" where this machine's bf16 matmul measured >= 4x faster than fp32
    # (policies/training/precision.py). Off unless a recipe asks: bf16 rounding widens the gap
    # between the trainer's log-probs and the engines' behaviour log-probs (the TIS weight).
    mixed_precision: MixedPrecision = "off"
    # megatron backend only: tensor / expert model-parallel sizes (each divides num_shards; the
    # data-parallel size is num_shards / tensor_parallel_size).
    tensor_parallel_size: int = 1
    expert_parallel_size: int = 1
    # megatron backend only: MoE load-balancing auxiliary loss coefficient (0: router untouched).
    moe_aux_loss_coeff: float = 0.0
    # megatron backend only: pad the vocabulary to a multiple of this x tensor_parallel_size.
    vocab_multiple: int = 1
    # megatron backend only: recompute each transformer layer in backward (less activation memory).
    recompute_activations: bool = False
    # Gradients are all-reduced over the data-parallel group in buckets of this many MiB.
    grad_bucket_mb: int = 256
    # Checkpoints kept under runs/<name>/checkpoints (older ones are deleted after a save).
    keep_checkpoints: int = 3
    # When the driver saves a checkpoint (actors.stages.restart.CheckpointCadence): after the last step,
    # and whenever either cadence below is due. By time is the default, because what a crash
    # costs is wall time: at most this many seconds of training (plus the step in progress)
    # are lost. Counted from the end of the previous save (or the run's start); 0: off.
    checkpoint_every_s: float = 600.0
    # Also every this many steps (step % interval == 0); 0: off.
    checkpoint_interval: int = 0
    # NCCL weight broadcast to engines: tensors per update call, in buckets of this many MiB.
    weight_bucket_mb: int = 512


@dataclass
class SFTConfig:
    # OpenAI-style JSONL: one {"messages": [...], "tools": [...]?, "resolved": bool?} per line.
    data: str = ""
    # The HF model directory written (weights, config, tokenizer); use it as model.path.
    out_dir: str = "runs/sft"
    lr: float = 5e-4
    # "cosine": sft.lr decays to 0 by the last step. At the default's 300 steps it learned half as
    # much (held-out 14.5% against constant's 44.0%, README): what the rate integrates to decides.
    lr_schedule: LrSchedule = "constant"
    batch_size: int = 16
    epochs: int = 1
    # Stop after this many optimizer steps (0: run all epochs).
    max_steps: int = 0
    # Longer conversations are truncated to this many tokens.
    max_seq_tokens: int = 2048
    # Loss on every token, not only the assistant's (helped the tiny model; see LEARNING.md).
    loss_on_all_tokens: bool = False
    # Keep only traces whose "resolved" flag is true (traces without the flag are kept).
    filter_resolved: bool = True
    seed: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    # Matmuls in bf16 under autocast (weights and optimizer state stay fp32): "auto" uses it where
    # this machine's bf16 matmul measured >= 4x faster than fp32 (AMX CPUs, CUDA; policies/training/
    # precision.py), "off" never, "bf16" always. On the 2-core machine: 1.46x the fp32 steps/s.
    mixed_precision: MixedPrecision = "auto"
