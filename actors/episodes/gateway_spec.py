"""What an episode actor's session gateway serves (actors/episodes/gateway.py), as plain data.

Apart from the gateway itself so that every episode actor can receive it (its arguments are
unpickled by module) without importing aiohttp: only a harness episode starts a gateway, and
the aiohttp import costs each of the other episode actors' processes megabytes.
"""
from __future__ import annotations

from dataclasses import dataclass

from configs.schema import DeadlinesConfig

# The id /models reports and replies carry; a harness may name the model anything.
POLICY_MODEL_ID = "swerve-policy"


@dataclass(frozen=True)
class GatewaySpec:
    """What an episode actor's gateway serves, from the run's config."""
    max_model_len: int
    request_deadline_s: float
    step_s: float = DeadlinesConfig.gateway_step_s

    @classmethod
    def from_config(cls, cfg) -> "GatewaySpec":
        """cfg: the run's configs.schema.Config; the context is the engine's and the rollout's bound."""
        return cls(min(cfg.engine.max_context_tokens, cfg.rollout.max_total_tokens), cfg.deadlines.gateway_request_s,
                   cfg.deadlines.gateway_step_s)
