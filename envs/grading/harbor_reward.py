"""A Harbor verifier's reward, from the files it left in /logs/verifier (Harbor 0.25's rules).

reward.json before reward.txt. reward.json is a flat object of numbers (or one number): its reward
is the key `key` (env.swe.harbor_reward_key; Harbor's documented "reward"), else the only key.
reward.txt holds one number. A reward file that is missing, empty, malformed or not finite is
the attempt's 0 with the reason: what the verifier wrote about the agent's work is the agent's
outcome, never an infra error.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional

from envs.tasks.hostile_json import load_bounded

# A reward file larger than this is not a reward (the grader reads no more of it).
MAX_REWARD_BYTES = 65536
# A flat object of numbers is 1 deep; a little room for a verifier's own metadata.
MAX_REWARD_DEPTH = 4


@dataclass(frozen=True)
class Reward:
    value: float
    # Why the value is 0 without the verifier saying so; "" when a reward file said it.
    problem: str = ""
    # Every named reward of reward.json (the trajectory keeps them), {"reward": v} for reward.txt.
    named: Mapping[str, float] = field(default_factory=dict)


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: {str(value)[:100]!r} is not a number")
    try:
        number = float(value)  # an int past float's range raises here, not at isfinite
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"{where}: {str(value)[:100]} is not finite")
    return number


def _from_json(data: bytes, key: str) -> tuple[float, dict]:
    parsed = load_bounded(data, MAX_REWARD_BYTES, MAX_REWARD_DEPTH)
    if not isinstance(parsed, dict):
        value = _number(parsed, "reward.json")
        return value, {key: value}
    named = {str(name): _number(value, f"reward.json key {name!r}") for name, value in parsed.items()}
    if key in named:
        return named[key], named
    if len(named) == 1:
        return next(iter(named.values())), named
    raise ValueError(f"reward.json has no key {key!r} and {len(named)} others {sorted(named)[:5]} "
                     "(set env.swe.harbor_reward_key to the one to train on)")


def read_reward(files: Mapping[str, Optional[bytes]], key: str) -> Reward:
    """files: reward file name -> its bytes (None when absent), in the order to read them."""
    for name, data in files.items():
        if data is None:
            continue
        if len(data) > MAX_REWARD_BYTES:
            return Reward(0.0, f"{name} is larger than {MAX_REWARD_BYTES} bytes", {})
        if not data.strip():
            return Reward(0.0, f"{name} is empty", {})
        try:
            if name.endswith(".json"):
                value, named = _from_json(data, key)
            else:
                value = _number(float(data.decode("utf-8").strip()), name)
                named = {key: value}
        except (ValueError, UnicodeDecodeError) as error:  # HostileJSONError is a ValueError
            return Reward(0.0, f"{name} is malformed: {error}"[:500], {})
        return Reward(value, "", named)
    return Reward(0.0, f"the verifier wrote no reward file ({' or '.join(files)})", {})
