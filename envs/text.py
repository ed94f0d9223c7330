"""Text that fits a gymnasium Text space: a full charset and head+tail truncation."""
from __future__ import annotations

from gymnasium import spaces

from envs.actions import MAX_REPLY_CHARS

# Whitespace, printable ASCII and the rest of the Basic Multilingual Plane, less control
# characters and surrogates: what command output and source code contain in practice.
FULL_CHARSET: frozenset[str] = frozenset(
    "\t\n\r"
    + "".join(chr(c) for c in range(0x20, 0x7F))
    + "".join(chr(c) for c in range(0xA0, 0xD800))
    + "".join(chr(c) for c in range(0xE000, 0xFFFE))
)
REPLACEMENT = "\ufffd"
# The action space admits any reply parse_action will judge (longer ones are format errors).
MAX_ACTION_CHARS = MAX_REPLY_CHARS


def text_space(max_length: int) -> spaces.Text:
    return spaces.Text(max_length=max_length, min_length=0, charset=FULL_CHARSET)


def sanitize(text: str) -> str:
    """Replace characters outside FULL_CHARSET (control bytes, astral code points)."""
    if all(char in FULL_CHARSET for char in text):
        return text
    return "".join(char if char in FULL_CHARSET else REPLACEMENT for char in text)


def truncate_middle(text: str, max_chars: int) -> str:
    """Keep the head and tail of text within max_chars, marking how many characters were elided."""
    text = sanitize(text)
    if len(text) <= max_chars:
        return text
    marker = f"\n[... {len(text)} characters elided ...]\n"
    keep = max_chars - len(marker)
    if keep <= 0:
        return text[:max_chars]
    head = keep // 2
    tail = keep - head
    marker = f"\n[... {len(text) - keep} characters elided ...]\n"
    return text[:head] + marker + (text[-tail:] if tail else "")

