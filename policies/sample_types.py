"""What an engine is asked and answers, and what the trainer learns from, free of torch:
episode actors, routers and the collector import only this."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

# Why a generation ended (SampleOutput.finish_reason): SGLang's finish_reason "type" strings, so
# what the server's wire says (policies/engines/protocol.py, which imports these) needs no mapping.
FINISH_STOP = "stop"        # a stop token was sampled (it ends the output)
FINISH_LENGTH = "length"    # max_new_tokens or the context cap
FINISH_ABORT = "abort"      # aborted or paused mid-generation (the engine actor resumes these)


@dataclass
class SampleRequest:
    prompt_ids: List[int]
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop_token_ids: Tuple[int, ...] = ()
    # Stop strings (SGLang's sampling_params.stop): the engine ends generation at the first token
    # whose text holds one, keeping that token, so a harness's `stop` costs no tokens past it.
    # The session still cuts the reply there (a resumed or scripted sample may run past it).
    stop: Tuple[str, ...] = ()
    seed: Optional[int] = None
    # Larger is served first (SGLang's sense); None: lowest. See age_priority.
    priority: Optional[int] = None


@dataclass
class SampleOutput:
    token_ids: List[int] = field(default_factory=list)
    logprobs: List[float] = field(default_factory=list)
    versions: List[int] = field(default_factory=list)
    finish_reason: str = FINISH_LENGTH  # FINISH_STOP | FINISH_LENGTH | FINISH_ABORT


@dataclass
class TrainSample:
    """One trajectory as the trainer sees it (policies.training.trainer.pad_samples pads a batch of them)."""
    token_ids: List[int]
    loss_mask: List[int]
    behavior_logprobs: List[float]
    advantage: float
    # Policy version that generated each token (the trainer compares log-probs at its own version).
    versions: List[int] = field(default_factory=list)


# Age priorities: one policy version outweighs any start-time difference (10**12 deciseconds
# is 3,000 years); within a version, 10 per second of start time.
_VERSION_STRIDE = 10**12


def age_priority(oldest_version: int, started_s: float) -> int:
    """Straggler-first priority (engine.priority=age): the older a trajectory (its oldest token's
    policy version, then its start time, s since the epoch), the larger."""
    return -(oldest_version * _VERSION_STRIDE + int(started_s * 10))
