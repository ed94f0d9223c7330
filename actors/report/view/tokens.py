"""A trajectory's generated tokens as text pieces, one per token, so the page can colour each by
the policy version that generated it: decoded with the run's tokenizer, secrets blanked across a
reply's pieces (a secret split over tokens is found whole: actors/report/redact.py)."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

from actors.report import redact

# Tokens decoded together to find the next one's text: a byte-level token may hold part of a
# character, and some tokenizers change a token's text by what precedes it.
WINDOW = 8
INCOMPLETE = "\ufffd"
# A character is at most 4 bytes: a token still incomplete after that many is shown as it decodes.
MAX_PENDING = 4
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def find_tokenizer(stage_dir: Path) -> Optional[Path]:
    """The folder of the tokenizer that generated the stage's tokens: the policy the stage wrote,
    or the one it started from (its config's model.path); None when neither is here."""
    candidates = [stage_dir / "policy"]
    config = stage_dir / "config.yaml"
    if config.is_file():
        from configs import load_config

        model_path = load_config(str(config)).model.path
        if model_path:
            candidates.append(Path(model_path))
    return next((path for path in candidates if any((path / name).is_file() for name in TOKENIZER_FILES)), None)


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str):
    from policies.tokenizer import load_tokenizer

    return load_tokenizer(path)


def token_pieces(tokenizer, ids: list[int]) -> list[str]:
    """One text piece per token; their concatenation is the text of `ids`. A token that ends
    inside a character gets "" and the token that completes it the whole character."""
    pieces, emitted = [], 0  # emitted: tokens whose text is already in pieces
    for end in range(1, len(ids) + 1):
        start = max(0, emitted - WINDOW)
        before = tokenizer.decode(ids[start:emitted], skip_special_tokens=False)
        text = tokenizer.decode(ids[start:end], skip_special_tokens=False)
        if text.endswith(INCOMPLETE) and end < len(ids) and end - emitted < MAX_PENDING:
            pieces.append("")
            continue
        pieces.append(text[len(before):] if text.startswith(before) else text)
        emitted = end
    return pieces


class ReplyPieces:
    """Every generated token's text, reply by reply, secrets blanked within each reply; the ids
    themselves (as "<id>") when the run's tokenizer is not here. One per page written: each
    stage's tokenizer is looked up once (reading a stage's config costs ~0.4 s, and a run's steps
    hold hundreds of trajectories), and a later page looks again (a policy written since)."""

    def __init__(self):
        self._paths: dict[Path, Optional[Path]] = {}

    def __call__(self, stage_dir: Path, ids: list[int], replies: list[int]) -> list[str]:
        if stage_dir not in self._paths:
            self._paths[stage_dir] = find_tokenizer(stage_dir)
        path = self._paths[stage_dir]
        if path is None:
            return [f"<{token}>" for token in ids]
        tokenizer, out, at = _tokenizer(str(path)), [], 0
        for length in replies:
            out += redact.redact_pieces(token_pieces(tokenizer, ids[at:at + length]))
            at += length
        return out
