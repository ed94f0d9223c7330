"""Parse one agent reply into an action (mini-swe-agent protocol).

A valid reply holds exactly one fenced ```bash (or ```sh) block with one command.
The block `submit` ends the episode. Anything else is a format error whose message
goes back to the agent as the next observation.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

SUBMIT_SENTINEL = "submit"
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
    if command == SUBMIT_SENTINEL:
        return Action(SUBMIT)
    return Action(COMMAND, command=command)
