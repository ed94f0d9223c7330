"""Per-token log-probabilities of given sequences under a model (the trainer's forward)."""
from __future__ import annotations

import torch
from transformers import PreTrainedModel


def sequence_logprobs(
    model: PreTrainedModel,
    token_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Entry [b, t] is log p(token_t | tokens_<t) under softmax(logits / temperature).

    Entry 0 and padding entries are 0. Positions are counted from each row's first real
    token, so left- and right-padded batches give the same values as the sampler, which
    left-pads. Differentiable.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for log-probs, got {temperature}")
    position_ids = (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)
    logits = model(
        input_ids=token_ids, attention_mask=attention_mask, position_ids=position_ids,
        use_cache=False,
    ).logits[:, :-1].float() / temperature
    targets = token_ids[:, 1:].unsqueeze(-1)
    # gather - logsumexp avoids materialising a second [B, T, V] log-softmax tensor.
    next_logprobs = logits.gather(-1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    next_logprobs = next_logprobs * attention_mask[:, 1:].to(next_logprobs.dtype)
    return torch.nn.functional.pad(next_logprobs, (1, 0))
