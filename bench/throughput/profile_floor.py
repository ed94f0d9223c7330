"""The arithmetic floor of an RL step: what its tokens cost at the speed this machine does this
model's arithmetic, plus the environment's own work, against which `swerve bench profile` sets the
measured step.

    rate = model_flops_per_core_s(model_path)      # measured: the model's own forward + backward
    floor = step_floor(row, params, rate, env_cpu_s, cores)

Per token, a forward is 2 FLOPs per parameter and forward + backward 6 (the usual count; attention
over <= 2k positions adds a few percent at this size and is left out). Every token of a trained
sequence is computed once by an engine (as prefill or as a decoded token, with a perfect prefix
cache) and once forward + backward by the trainer: 8 FLOPs per parameter per trained token. Tokens
generated for groups that were then dropped, repeated prefills and the trainer's second forward
(proximal log-probs) are not in the floor: they are what the profile measures as overhead.
"""
from __future__ import annotations

import statistics
import time


def model_params(model_path: str) -> int:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path)
    return sum(p.numel() for p in model.parameters())


def model_flops_per_core_s(model_path: str, batch: int = 8, seq_tokens: int = 512, repetitions: int = 3) -> float:
    """FLOP/s of one core on the model's own training arithmetic (forward + backward of a padded
    batch, the trainer's shape), one torch thread: the best rate this step's work can run at."""
    import torch
    from transformers import AutoModelForCausalLM

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = AutoModelForCausalLM.from_pretrained(model_path)
        params = sum(p.numel() for p in model.parameters())
        ids = torch.randint(0, model.config.vocab_size, (batch, seq_tokens))
        times = []
        for _ in range(repetitions + 1):  # the first warms the allocator and kernels up
            started = time.perf_counter()
            model(input_ids=ids).logits.float().logsumexp(-1).mean().backward()
            times.append(time.perf_counter() - started)
            model.zero_grad(set_to_none=True)
        return 6 * params * batch * seq_tokens / statistics.median(times[1:])
    finally:
        torch.set_num_threads(threads)


def step_floor(row: dict, params: int, flops_per_core_s: float, env_cpu_s: float, cores: int) -> dict:
    """The floor of one step (a metrics row): CPU-seconds of its arithmetic and its environment
    work, and the wall time of both spread over every core."""
    trained = row["tokens_trained"]
    engine_s = 2 * params * trained / flops_per_core_s
    trainer_s = 6 * params * trained / flops_per_core_s
    cpu_s = engine_s + trainer_s + env_cpu_s
    return {"floor_engine_cpu_s": engine_s, "floor_trainer_cpu_s": trainer_s, "floor_env_cpu_s": env_cpu_s,
            "floor_cpu_s": cpu_s, "floor_wall_s": cpu_s / cores}
