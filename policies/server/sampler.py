"""Next-token sampling for the CPU server (policies/server/scheduler.py), and the log-prob the
trainer must reproduce.

The log-prob of a sampled token is log_softmax(logits / temperature) at the token, taken before
top-p truncation, so the trainer's `sequence_logprobs(..., temperature)` recomputes it exactly.
Greedy (temperature 0) takes the argmax and reports the temperature-1 log-prob.
"""
from __future__ import annotations

import inspect
from typing import List, Optional, Sequence, Tuple

import torch
from transformers import PreTrainedModel


def sample_token(
    logits: torch.Tensor, temperature: float, top_p: float,
    generator: Optional[torch.Generator],
) -> Tuple[int, float]:
    """(token, logprob) for one row of next-token logits [vocab]."""
    if temperature == 0:
        token = int(torch.argmax(logits))
        return token, float(torch.log_softmax(logits, dim=-1)[token])
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    probs = logprobs.exp()
    if top_p < 1.0:
        probs = _top_p_filter(probs, top_p)
    token = int(torch.multinomial(probs, 1, generator=generator))
    return token, float(logprobs[token])


def pick_tokens(logits: torch.Tensor, temperatures: Sequence[float], top_ps: Sequence[float],
                generators: Sequence[Optional[torch.Generator]]) -> List[Tuple[int, float]]:
    """`sample_token` for every row of logits [rows, vocab], with the log-softmax batched: one
    kernel for the whole running batch instead of one per row (the decode step's hot path)."""
    temps = torch.tensor([t or 1.0 for t in temperatures], dtype=logits.dtype, device=logits.device)
    logprobs = torch.log_softmax(logits / temps[:, None], dim=-1)
    greedy = [t == 0 for t in temperatures]
    argmax = logits.argmax(dim=-1).tolist() if any(greedy) else None
    tokens: List[int] = []
    for i, (temperature, top_p, generator) in enumerate(zip(temperatures, top_ps, generators)):
        if greedy[i]:
            tokens.append(argmax[i])
        elif top_p < 1.0:
            tokens.append(sample_token(logits[i], temperature, top_p, generator)[0])
        else:
            tokens.append(int(torch.multinomial(logprobs[i].exp(), 1, generator=generator)))
    # Greedy rows divided by 1.0 above: their log-prob is the temperature-1 one, as sample_token's.
    values = logprobs.gather(-1, torch.tensor(tokens, dtype=torch.long, device=logits.device)[:, None])[:, 0]
    return list(zip(tokens, values.tolist()))


def make_generator(seed: Optional[int], device: torch.device) -> torch.Generator:
    """A per-request generator: seeded when a seed is given, else nondeterministic (on purpose:
    no seed was asked for)."""
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator


def cache_kwarg(model: PreTrainedModel) -> str:
    # transformers 5.x renamed `past_key_values` to `cache` (the old name warns, then goes);
    # the GPU machine's python may carry an older transformers.
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_probs, order = torch.sort(probs, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    # Keep the smallest prefix whose mass reaches top_p (the top token always survives).
    sorted_probs = torch.where(mass_before < top_p, sorted_probs, torch.zeros_like(sorted_probs))
    filtered = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return filtered / filtered.sum()
