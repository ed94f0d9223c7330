"""One generation request of the CPU server: what it asks, what it got so far, when it ends."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence

import torch

from policies.engines import protocol


class PromptTooLong(ValueError):
    """The prompt alone reaches max_context_tokens; answered with HTTP 400 naming the limit."""


@dataclass
class Request:
    """One generation request and everything the scheduler knows about it."""

    prompt_ids: List[int]
    params: protocol.SamplingParams
    rid: str = field(default_factory=lambda: uuid.uuid4().hex)
    return_logprob: bool = False
    priority: Optional[int] = None    # larger first under priority scheduling; None: lowest
    # Called once, from the scheduler thread, when the request finishes (any reason).
    on_done: Optional[Callable[["Request"], None]] = None
    # Called from the scheduler thread after each token is appended to output_ids (streaming); must be quick.
    on_token: Optional[Callable[["Request"], None]] = None
    # Called from the scheduler thread with output_ids after each token: the stop string the text now
    # holds (the request ends with finish reason {"type": "stop", "matched": <it>}), else None.
    # policies/server/detokenize.py StopStrings.
    stop_check: Optional[Callable[[List[int]], Optional[str]]] = None

    output_ids: List[int] = field(default_factory=list)
    logprobs: List[float] = field(default_factory=list)
    versions: List[Any] = field(default_factory=list)
    finish_reason: Optional[Dict[str, Any]] = None
    weight_version: str = ""          # version when it finished (SGLang's meta_info field)
    max_new_tokens: int = 0           # after the context cap (set by the scheduler)
    created: float = field(default_factory=time.monotonic)
    finished_at: float = 0.0
    # scheduler-private: tokens whose KV the running batch holds, and the sampling stream
    _kv_len: int = 0
    _generator: Optional[torch.Generator] = None

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def tokens(self) -> List[int]:
        """Prompt and output so far: what a (re-)prefill computes the KV of."""
        return self.prompt_ids + self.output_ids


def check_prompt(prompt_ids: Sequence[int], max_context_tokens: int) -> None:
    if not prompt_ids:
        raise ValueError("input_ids is empty")
    if len(prompt_ids) >= max_context_tokens:
        raise PromptTooLong(
            f"The input ({len(prompt_ids)} tokens) is longer than the server's context "
            f"cap max_context_tokens={max_context_tokens} allows (at most "
            f"{max_context_tokens - 1} prompt tokens, leaving room for one "
            "generated token).")


def check_request(request: Request, max_context_tokens: int, vocab_size: int) -> None:
    """Raise ValueError (PromptTooLong for a prompt at the cap) for a request the server refuses."""
    check_prompt(request.prompt_ids, max_context_tokens)
    params = request.params
    if params.max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {params.max_new_tokens}")
    if params.temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {params.temperature}")
    if not 0.0 < params.top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {params.top_p}")
    if params.top_k not in (-1, 0, None):
        raise ValueError("top_k is not supported by the swerve CPU server (use -1)")
    bad = [t for t in request.prompt_ids if not 0 <= int(t) < vocab_size]
    if bad:
        raise ValueError(f"input_ids out of vocabulary range [0, {vocab_size}): {bad[:5]}")


def stop_reason(request: Request, token: int, eos_token_ids: FrozenSet[int]) -> Optional[Dict[str, Any]]:
    """The finish reason once `token` was appended, or None while the request goes on."""
    params = request.params
    if (not params.ignore_eos and token in eos_token_ids) or token in params.stop_token_ids:
        return {"type": protocol.FINISH_STOP, "matched": token}
    if request.stop_check is not None:
        matched = request.stop_check(request.output_ids)
        if matched is not None:  # as SGLang reports a stop string: the string itself
            return {"type": protocol.FINISH_STOP, "matched": matched}
    if len(request.output_ids) >= request.max_new_tokens:
        return {"type": protocol.FINISH_LENGTH, "length": len(request.output_ids)}
    return None
