"""Parse one agent reply into an action (mini-swe-agent protocol).

A valid reply holds exactly one fenced ```bash (or ```sh) block with one command.
The block `submit` ends the episode. Anything else is a format error whose message
goes back to the agent as the next observation.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

SUBMIT_SENTINEL = "submit"
# A reply longer than this is refused before parsing: no useful turn is that long, and the
# engine's per-turn token cap should have ended it (envs.text.MAX_ACTION_CHARS, the action space).
MAX_REPLY_CHARS = 1_000_000
# Linux refuses one exec argument over 128 KiB (MAX_ARG_STRLEN), and the command is one
# argument of `bash -c`; a longer one would fail as an infrastructure error, not the agent's.
MAX_COMMAND_BYTES = 100_000
_BLOCK = re.compile(r"```(?:bash|sh)[ \t]*\n(.*?)```", re.DOTALL)
_ANY_FENCE = re.compile(r"```")

COMMAND = "command"
SUBMIT = "submit"
FORMAT_ERROR = "format_error"


@dataclass(frozen=True)
class Action:
    kind: str  # COMMAND | SUBMIT | FORMAT_ERROR
    command: str = ""
    error: str = ""


def parse_action(reply: str) -> Action:
    if len(reply) > MAX_REPLY_CHARS:
        return Action(
            FORMAT_ERROR,
            error=(
                f"Format error: the reply is {len(reply)} characters, over the limit of "
                f"{MAX_REPLY_CHARS}; reply with a short explanation and one ```bash block."
            ),
        )
    blocks = _BLOCK.findall(reply)
    if len(blocks) != 1:
        found = "no" if not blocks else str(len(blocks))
        return Action(
            FORMAT_ERROR,
            error=(
                f"Format error: found {found} ```bash blocks; reply with exactly one "
                "```bash block holding one command (or `submit` when done)."
            ),
        )
    command = blocks[0].strip()
    if not command:
        return Action(FORMAT_ERROR, error="Format error: the ```bash block is empty.")
    if "\x00" in command:
        return Action(FORMAT_ERROR, error="Format error: the command contains a NUL byte.")
    try:
        # Every backend sends the command as UTF-8 (exec channel, docker, e2b): a lone surrogate
        # ("\ud800", from a model's reply or a harness) cannot be sent, so it is the agent's error.
        command_bytes = len(command.encode("utf-8"))
    except UnicodeEncodeError as error:
        return Action(FORMAT_ERROR, error=(
            f"Format error: the command is not valid UTF-8 (a lone surrogate {command[error.start]!r} at "
            f"character {error.start}); write the character another way."))
    if command_bytes > MAX_COMMAND_BYTES:
        return Action(
            FORMAT_ERROR,
            error=(
                f"Format error: the command is {command_bytes} bytes, over the limit of "
                f"{MAX_COMMAND_BYTES}; write long file contents in several shorter commands."
            ),
        )
    if command == SUBMIT_SENTINEL:
        return Action(SUBMIT)
    return Action(COMMAND, command=command)
