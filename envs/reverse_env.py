"""swerve/Reverse-v0: a one-step text env (reverse a word with `echo`) that proves env swapping."""
from __future__ import annotations

import shlex
import zlib
from typing import Optional

import gymnasium

from envs.outcomes import Outcome
from envs.text import MAX_ACTION_CHARS, text_space, truncate_middle
from envs.actions import COMMAND, FORMAT_ERROR, parse_action

WORDS = ("gymnasium", "sandbox", "trajectory", "policy", "reward", "staleness", "rollout", "kernel")
MAX_OBSERVATION_CHARS = 2000


class ReverseEnv(gymnasium.Env):
    metadata = {"render_modes": []}

    def __init__(self, render_mode: Optional[str] = None):
        if render_mode is not None:
            raise ValueError(f"ReverseEnv renders nothing; got render_mode={render_mode!r}")
        self.observation_space = text_space(MAX_OBSERVATION_CHARS)
        self.action_space = text_space(MAX_ACTION_CHARS)
        self.word = ""

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        task = (options or {}).get("task")
        # A task (any record with an id) fixes the word, so every member of a group gets the same one.
        index = zlib.crc32(task.id.encode()) if task is not None else int(self.np_random.integers(len(WORDS)))
        self.word = WORDS[index % len(WORDS)]
        prompt = (
            f"Reverse the word '{self.word}'. Reply with one ```bash block that runs "
            "`echo <the reversed word>`."
        )
        return prompt, {"task_id": f"reverse-{self.word}", "outcome": None, "exec_s": 0.0}

    def step(self, action: str):
        parsed = parse_action(action)
        if parsed.kind == FORMAT_ERROR:
            return truncate_middle(parsed.error, MAX_OBSERVATION_CHARS), 0.0, True, False, {
                "outcome": Outcome.FORMAT_ERROR.value,
                "exec_s": 0.0,
            }
        # The reply is judged, never run: shlex only reads the words the agent wrote.
        resolved = parsed.kind == COMMAND and _echo_words(parsed.command) == ["echo", self.word[::-1]]
        outcome = Outcome.RESOLVED if resolved else Outcome.UNRESOLVED
        observation = f"{outcome.value}: expected `echo {self.word[::-1]}`"
        return observation, float(resolved), True, False, {"outcome": outcome.value, "exec_s": 0.0}


def _echo_words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        # Unbalanced quotes: not a valid echo command, so the answer is wrong.
        return []
