"""Batched, KV-cached autoregressive sampling for the built-in CPU engine.

Prompts are left-padded so every row's next token sits in the last column; explicit
position ids count from each row's first real token, so a padded row computes the same
thing as the row alone. One prefill, then one decode forward per token for the whole
batch; rows finish independently.

Every forward runs inside `step_guard()`, which yields the policy version of the weights
in use; the engine may swap weights between forwards, so one sequence can carry tokens of
several versions, and each token is tagged with the version that produced it.
"""
from __future__ import annotations

import inspect
from typing import Callable, ContextManager, List, Optional, Tuple

import torch
from transformers import DynamicCache, PreTrainedModel

from policies.sample_types import FINISH_LENGTH, FINISH_STOP, SampleOutput, SampleRequest  # noqa: F401 (re-exported)


@torch.no_grad()
def generate_batch(
    model: PreTrainedModel,
    requests: List[SampleRequest],
    step_guard: Callable[[], ContextManager[int]],
) -> List[SampleOutput]:
    for request in requests:
        _validate(request)
    device = model.get_input_embeddings().weight.device
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    batch_size = len(requests)
    width = max((len(r.prompt_ids) for r in requests), default=0)

    input_ids = torch.full((batch_size, width), pad_id, dtype=torch.long, device=device)
    attention_mask = torch.zeros((batch_size, width), dtype=torch.long, device=device)
    for row, request in enumerate(requests):
        length = len(request.prompt_ids)
        input_ids[row, width - length:] = torch.tensor(request.prompt_ids, device=device)
        attention_mask[row, width - length:] = 1
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)

    generators = [_generator(r.seed, device) for r in requests]
    outputs = [SampleOutput() for _ in requests]
    active = [r.max_new_tokens > 0 for r in requests]
    cache = DynamicCache(config=model.config)
    cache_kwarg = _cache_kwarg(model)

    while any(active):
        next_ids = torch.full((batch_size,), pad_id, dtype=torch.long, device=device)
        with step_guard() as version:
            logits = model(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                use_cache=True, logits_to_keep=1, **{cache_kwarg: cache},
            ).logits[:, -1].float()
            for row, request in enumerate(requests):
                if not active[row]:
                    continue
                token, logprob = _sample(logits[row], request, generators[row])
                out = outputs[row]
                out.token_ids.append(token)
                out.logprobs.append(logprob)
                out.versions.append(int(version))
                next_ids[row] = token
                if token in request.stop_token_ids:
                    out.finish_reason = FINISH_STOP
                    active[row] = False
                elif len(out.token_ids) >= request.max_new_tokens:
                    active[row] = False
        # Finished rows keep decoding a pad token (ignored) so the batch stays rectangular.
        input_ids = next_ids.unsqueeze(1)
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones(batch_size, 1)], 1)
        position_ids = position_ids[:, -1:] + 1
    return outputs


def _cache_kwarg(model: PreTrainedModel) -> str:
    # transformers 5.x renamed `past_key_values` to `cache` (the old name warns, then goes);
    # the GPU machine's python may carry an older transformers.
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _validate(request: SampleRequest) -> None:
    if not request.prompt_ids:
        raise ValueError("SampleRequest.prompt_ids is empty")
    if request.max_new_tokens < 0:
        raise ValueError(f"SampleRequest.max_new_tokens must be >= 0, got {request.max_new_tokens}")
    if request.temperature < 0:
        raise ValueError(f"SampleRequest.temperature must be >= 0, got {request.temperature}")
    if not 0.0 < request.top_p <= 1.0:
        raise ValueError(f"SampleRequest.top_p must be in (0, 1], got {request.top_p}")


def _generator(seed: Optional[int], device: torch.device) -> torch.Generator:
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()  # nondeterministic, on purpose: no seed asked
    else:
        generator.manual_seed(seed)
    return generator


def _sample(
    logits: torch.Tensor, request: SampleRequest, generator: torch.Generator
) -> Tuple[int, float]:
    return sample_token(logits, request.temperature, request.top_p, generator)


def sample_token(
    logits: torch.Tensor, temperature: float, top_p: float,
    generator: Optional[torch.Generator],
) -> Tuple[int, float]:
    """Return (token, logprob) for one row of next-token logits.

    The logprob is log_softmax(logits / temperature) at the token, taken before top-p
    truncation, so the trainer's `sequence_logprobs(..., temperature)` reproduces it.
    Greedy (temperature 0) reports the temperature-1 logprob. Shared by `generate_batch`
    and the CPU server's continuous-batching scheduler (policies/server/scheduler.py).
    """
    if temperature == 0:
        token = int(torch.argmax(logits))
        return token, float(torch.log_softmax(logits, dim=-1)[token])
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    probs = logprobs.exp()
    if top_p < 1.0:
        probs = _top_p_filter(probs, top_p)
    token = int(torch.multinomial(probs, 1, generator=generator))
    return token, float(logprobs[token])


def make_generator(seed: Optional[int], device: torch.device) -> torch.Generator:
    """A per-request generator: seeded when a seed is given, else nondeterministic."""
    return _generator(seed, device)


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_probs, order = torch.sort(probs, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    # Keep the smallest prefix whose mass reaches top_p (the top token always survives).
    sorted_probs = torch.where(mass_before < top_p, sorted_probs, torch.zeros_like(sorted_probs))
    filtered = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return filtered / filtered.sum()
