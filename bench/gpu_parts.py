"""The GPU check's worker (bench/gpu_check.py starts it): the parts that use the model, in one process.

    python -m bench.gpu_parts --size full|tiny --cache DIR --results FILE [--require-cuda] PART...

The first line of FILE names the device and the versions ({"event": "device"}); each part then
appends a line when it starts ({"part", "event": "started"}) and one when it ends ({"part", "status":
"ok" | "failed", "seconds", its figures, and "error" / "traceback" when it failed). A part fails on an
exception or on a check of its own figures (its "problems"); the next part runs either way. The parts
use the product's code: policies/model.py builds the Qwen3 checkpoint, policies/training/trainer.py
steps each backend, policies/training/megatron/ converts weights, policies/server/ decodes.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path

import torch

from bench.gpu_plan import SIZES, WORKER_PARTS, Size
from configs.schema import ModelConfig, TokenizerConfig, TrainerConfig
from policies.device import role_device
from policies.engines import protocol
from policies.model import ensure_model, load_model
from policies.sample_types import TrainSample
from policies.server.request import Request
from policies.server.scheduler import Scheduler
from policies.tokenizer import SPECIAL_TOKENS, ensure_tokenizer
from policies.training.logprobs import sequence_logprobs
from policies.training.trainer import Trainer

# What the offline tokenizer learns besides its built-in corpus (it needs one task's texts).
TASK_TEXTS = [["The total of an empty list should be zero, not an error.",
               "def total(items):\n    return sum(items) if items else 0\n"]]
# Two computations of the same fp32 log-probs (megatron vs HF, cached decode vs a full forward) may
# differ by kernel order, not more: 1e-4 on CPU (the tests), 1e-3 allowed on a GPU.
LOGPROB_TOLERANCE = 1e-3
SERVE_TIMEOUT_S = 120.0


class Context:
    def __init__(self, size: Size, cache_dir: str, require_cuda: bool):
        self.size, self.cache_dir, self.require_cuda = size, cache_dir, require_cuda
        self._model_path = ""

    def device(self) -> torch.device:
        if self.require_cuda and not torch.cuda.is_available():
            raise RuntimeError(f"CUDA is not available (torch {torch.__version__}, CUDA_VISIBLE_DEVICES="
                               f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}); on a machine without a GPU "
                               "run the dry mode: make gpu-check DRY=1")
        return role_device()

    def model_path(self) -> str:
        """The check's Qwen3 checkpoint, built by the product's builder (cached in cache_dir)."""
        if not self._model_path:
            s = self.size
            tokenizer = ensure_tokenizer(TokenizerConfig(cache_dir=self.cache_dir, vocab_size=s.vocab_size), TASK_TEXTS)
            self._model_path = ensure_model(ModelConfig(
                cache_dir=self.cache_dir, hidden_size=s.hidden_size, num_layers=s.num_layers, num_heads=s.num_heads,
                num_kv_heads=s.num_kv_heads, head_dim=s.head_dim, intermediate_size=s.intermediate_size,
                max_position_embeddings=s.max_position_embeddings), tokenizer)
        return self._model_path

    def vocab_size(self) -> int:
        return json.loads(Path(self.model_path(), "config.json").read_text())["vocab_size"]

    def random_ids(self, rows: int, tokens: int, seed: int) -> torch.Tensor:
        """Token ids clear of the special tokens."""
        generator = torch.Generator().manual_seed(seed)
        return torch.randint(len(SPECIAL_TOKENS), self.vocab_size(), (rows, tokens), generator=generator)


def part_model(ctx: Context) -> dict:
    from safetensors import safe_open

    started = time.perf_counter()
    path = ctx.model_path()
    with safe_open(os.path.join(path, "model.safetensors"), framework="pt") as weights:
        parameters = sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
    return {"path": path, "parameters": parameters, "vocab_size": ctx.vocab_size(),
            "checkpoint_mib": round(os.path.getsize(os.path.join(path, "model.safetensors")) / 2**20, 1),
            "build_s": round(time.perf_counter() - started, 2)}


def part_trainer(ctx: Context, backend: str) -> dict:
    """A few Trainer updates of one backend on one batch (GRPO, the product's defaults): step times, losses."""
    device = ctx.device()
    path, s = ctx.model_path(), ctx.size
    _reset_peak(device)
    started = time.perf_counter()
    trainer = Trainer(TrainerConfig(backend=backend), path)
    try:
        build_s = time.perf_counter() - started
        samples = _train_samples(ctx, trainer.backend)
        tokens = sum(sum(sample.loss_mask[1:]) for sample in samples)
        losses, step_s, stats = [], [], []
        for _ in range(s.train_steps):
            began = time.perf_counter()
            stats.append(trainer.train_step(samples, temperature=1.0, global_loss_tokens=tokens))
            _sync(device)
            step_s.append(round(time.perf_counter() - began, 4))
            losses.append(float(stats[-1]["loss"]))
    finally:
        trainer.close()
    problems = [] if all(math.isfinite(x) for x in losses) else [f"a loss is not finite: {losses}"]
    if losses[-1] == losses[0]:
        problems.append(f"the loss did not change over {len(losses)} updates: {losses}")
    steady_s = statistics.median(step_s[1:] or step_s)
    first = stats[0]
    return {"backend": backend, "device": str(device), "build_s": round(build_s, 2), "step_s": step_s,
            "step_s_median": steady_s, "tokens_per_s": round(s.train_batch * s.train_tokens / steady_s, 1),
            "loss": losses, "loss_falling": losses[-1] < losses[0],
            # Same weights, same backend: the behaviour log-probs must be reproduced (numerics only).
            "behavior_mismatch_mean": first["mismatch_abs_sum"] / max(first["mismatch_tokens"], 1),
            "peak_gib": _peak_gib(device), "problems": problems}


def _train_samples(ctx: Context, backend) -> list[TrainSample]:
    """A batch as the collector sends it: prompt then generated tokens, behaviour log-probs of the
    current weights, advantages +1 / -1 by row."""
    s = ctx.size
    ids = ctx.random_ids(s.train_batch, s.train_tokens, seed=0)
    with torch.no_grad():
        behavior = backend.sequence_logprobs(ids, torch.ones_like(ids), 1.0).float().cpu()
    generated = s.train_tokens - s.train_prompt_tokens
    return [TrainSample(token_ids=ids[row].tolist(), loss_mask=[0] * s.train_prompt_tokens + [1] * generated,
                        behavior_logprobs=behavior[row].tolist(), advantage=1.0 if row % 2 == 0 else -1.0,
                        versions=[-1] * s.train_prompt_tokens + [0] * generated)
            for row in range(s.train_batch)]


def part_conversion(ctx: Context) -> dict:
    """HF -> megatron (load) -> HF (export) exactly; megatron's log-probs equal HF's; after a megatron
    optimizer step, its exported weights loaded into the HF model (the trainer -> engine path) agree again."""
    from policies.training.megatron.backend import MegatronBackend
    from policies.training.megatron.model import MegatronOptions, read_hf_weights

    device = ctx.device()
    path, s = ctx.model_path(), ctx.size
    original = read_hf_weights(path)
    started = time.perf_counter()
    backend = MegatronBackend(None, path, rank=0, world_size=1, options=MegatronOptions())
    to_megatron_s = time.perf_counter() - started
    try:
        started = time.perf_counter()
        exported = backend.hf_state_dict()
        to_hf_s = time.perf_counter() - started
        problems = _state_problems(original, exported)
        hf = load_model(path).to(device)
        ids = ctx.random_ids(s.compare_batch, s.compare_tokens, seed=1)
        mask = torch.ones_like(ids)
        mask[-1, s.compare_tokens // 2:] = 0  # one right-padded row
        ids = ids * mask
        before = _logprob_gap(backend, hf, ids, mask)
        optimizer = torch.optim.AdamW(backend.parameters(), lr=1e-3)
        (-backend.sequence_logprobs(ids, mask, 1.0).sum() / mask.sum()).backward()  # padding entries are 0
        optimizer.step()
        stepped = backend.hf_state_dict()
        moved = max(float((stepped[name].float() - original[name].float()).abs().max()) for name in original)
        missing, unexpected = hf.load_state_dict(stepped, strict=False)
        missing = [name for name in missing if not (name == "lm_head.weight" and hf.config.tie_word_embeddings)]
        if missing or unexpected:
            problems.append(f"the exported weights do not fit the HF model: missing {missing[:3]}, unexpected {unexpected[:3]}")
        after = _logprob_gap(backend, hf, ids, mask)
    finally:
        backend.close()
    for name, gap in (("before", before), ("after a step", after)):
        if not gap <= LOGPROB_TOLERANCE:
            problems.append(f"megatron and HF log-probs differ by {gap:.2e} {name} (> {LOGPROB_TOLERANCE})")
    if moved == 0.0:
        problems.append("the megatron optimizer step moved no weight")
    return {"tensors": len(original), "to_megatron_s": round(to_megatron_s, 2), "to_hf_s": round(to_hf_s, 2),
            "round_trip_exact": not _state_problems(original, exported), "logprob_gap": before,
            "logprob_gap_after_step": after, "weight_change_max": moved, "problems": problems}


def _state_problems(original: dict, exported: dict) -> list[str]:
    if sorted(original) != sorted(exported):
        return [f"the round trip changed the tensor names: {sorted(set(original) ^ set(exported))[:5]}"]
    changed = [name for name in original if not torch.equal(original[name], exported[name].to(original[name].dtype))]
    return [f"the round trip changed {len(changed)} tensors: {changed[:3]}"] if changed else []


def _logprob_gap(backend, hf, ids: torch.Tensor, mask: torch.Tensor) -> float:
    with torch.no_grad():
        ours = backend.sequence_logprobs(ids, mask, 1.0).float()
        theirs = sequence_logprobs(hf, ids.to(ours.device), mask.to(ours.device), 1.0).float()
    return float((ours - theirs).abs().max())


def part_server(ctx: Context) -> dict:
    """The CPU engine server's scheduler and decoder with the model on the device: tokens/s alone and
    batched; the log-probs it reports equal a full forward's (what the trainer recomputes)."""
    device = ctx.device()
    path, s = ctx.model_path(), ctx.size
    model = load_model(path).to(device)
    _reset_peak(device)
    scheduler = Scheduler(model, max_batch_size=s.serve_requests,
                          max_context_tokens=s.serve_prompt_tokens + s.serve_new_tokens + 1,
                          prefix_cache_tokens=0, eos_token_ids=[model.config.eos_token_id])
    try:
        prompts = ctx.random_ids(s.serve_requests, s.serve_prompt_tokens, seed=2).tolist()
        _generate(scheduler, prompts[:1], 4)  # warm-up: kernels, allocator
        alone_s, _ = _generate(scheduler, prompts[:1], s.serve_new_tokens)
        batched_s, requests = _generate(scheduler, prompts, s.serve_new_tokens)
    finally:
        scheduler.stop()
    ids = torch.tensor([r.prompt_ids + r.output_ids for r in requests], device=device)
    with torch.no_grad():
        trainer = sequence_logprobs(model, ids, torch.ones_like(ids), 1.0)[:, s.serve_prompt_tokens:].float().cpu()
    served = torch.tensor([r.logprobs for r in requests])
    gap = float((trainer - served).abs().max())
    problems = [] if gap <= LOGPROB_TOLERANCE else [f"served log-probs differ from a full forward by {gap:.2e}"]
    return {"device": str(device), "new_tokens": s.serve_new_tokens, "requests": s.serve_requests,
            "tokens_per_s_alone": round(s.serve_new_tokens / alone_s, 1),
            "tokens_per_s_batched": round(s.serve_requests * s.serve_new_tokens / batched_s, 1),
            "decode_step_ms_batched": round(1000 * batched_s / s.serve_new_tokens, 2),
            "logprob_gap": gap, "peak_gib": _peak_gib(device), "problems": problems}


def _generate(scheduler: Scheduler, prompts: list[list[int]], new_tokens: int) -> tuple[float, list[Request]]:
    """Submit every prompt at once (sampling, ignore_eos); seconds until the last one finished."""
    done = threading.Semaphore(0)
    requests = [Request(prompt_ids=list(prompt), on_done=lambda _: done.release(), params=protocol.SamplingParams(
        max_new_tokens=new_tokens, temperature=1.0, ignore_eos=True, sampling_seed=i))
        for i, prompt in enumerate(prompts)]
    started = time.perf_counter()
    for request in requests:
        scheduler.submit(request)
    for _ in requests:
        if not done.acquire(timeout=SERVE_TIMEOUT_S):
            raise TimeoutError(f"the scheduler finished no request in {SERVE_TIMEOUT_S} s: {scheduler.stats()}")
    elapsed = time.perf_counter() - started
    wrong = [r.finish_reason for r in requests if r.finish_reason.get("type") != protocol.FINISH_LENGTH
             or len(r.output_ids) != new_tokens]
    if wrong:
        raise RuntimeError(f"{len(wrong)} of {len(requests)} requests did not generate {new_tokens} tokens: {wrong[:2]}")
    return elapsed, requests


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak_gib(device: torch.device):
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None


PARTS = {"model": part_model, "torch_trainer": lambda ctx: part_trainer(ctx, "torch"),
         "megatron_trainer": lambda ctx: part_trainer(ctx, "megatron"), "conversion": part_conversion,
         "server": part_server}
assert tuple(PARTS) == WORKER_PARTS


def device_facts() -> dict:
    import transformers

    facts = {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__,
             "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
             # TF32 matmuls would widen the log-prob gaps the parts check (fp32 expected).
             "float32_matmul_precision": torch.get_float32_matmul_precision()}
    try:
        import megatron.core
        facts["megatron_core"] = megatron.core.__version__
    except ImportError as error:
        facts["megatron_core"] = f"not importable: {error}"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                     gpu_count=torch.cuda.device_count())
    return facts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_parts")
    parser.add_argument("--size", choices=sorted(SIZES), required=True)
    parser.add_argument("--cache", required=True, help="where the tokenizer and the model are built")
    parser.add_argument("--results", type=Path, required=True, help="JSON lines, appended")
    parser.add_argument("--require-cuda", action="store_true")
    parser.add_argument("parts", nargs="+", choices=list(PARTS))
    args = parser.parse_args(argv)
    ctx = Context(SIZES[args.size], args.cache, args.require_cuda)

    def write(line: dict) -> None:
        with args.results.open("a") as out:
            out.write(json.dumps(line) + "\n")

    write({"event": "device", **device_facts()})
    for name in args.parts:
        write({"part": name, "event": "started", "time": time.time()})
        started = time.perf_counter()
        try:
            result = PARTS[name](ctx)
            problems = result.pop("problems", [])
            result = {"status": "failed", "error": "; ".join(problems), **result} if problems else {"status": "ok", **result}
        except Exception as error:  # reported as this part's failure; the next part still runs
            result = {"status": "failed", "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
        write({"part": name, "seconds": round(time.perf_counter() - started, 2), **result})
        gc.collect()  # the part's models and optimizer states go before the next part allocates its own
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
