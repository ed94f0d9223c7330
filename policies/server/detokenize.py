"""Text of a reply while it is generated: incremental detokenization, and the stop strings a
request ends at.

`IncrementalText` turns a growing list of token ids into text deltas (as TGI and vLLM do: each new
piece is decoded with a few tokens before it for context, and held while it ends in an incomplete
UTF-8 character). `StopStrings` is a request's `stop_check` (policies/server/request.py): called by
the scheduler after every sampled token, it answers the stop string the text now holds, so
generation ends there instead of running on to max_tokens. Both decode as the OpenAI route's reply
does (`skip_special_tokens=True`).

Torch-free: the streaming route and the scheduler thread each hold their own instances.
"""
from __future__ import annotations

import logging
from typing import Callable, List, Optional, Sequence

log = logging.getLogger(__name__)

# Decodes token ids to text (a tokenizer's decode with its options bound).
Decode = Callable[[List[int]], str]
_INCOMPLETE = "\ufffd"  # what a decoder writes for a UTF-8 character whose bytes are not all there yet


def text_decoder(tokenizer) -> Decode:
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)


class IncrementalText:
    """The text of a growing token list, delta by delta; `feed` costs a decode of the last few tokens,
    not of the whole list."""

    def __init__(self, decode: Decode):
        self._decode = decode
        self._prefix = 0  # tokens decoded for context only
        self._read = 0    # tokens whose text was handed out
        self.text = ""
        self.tokens = 0   # = self._read: tokens that make up self.text

    def feed(self, ids: Sequence[int]) -> str:
        """The text `ids` (the whole list so far, grown since the last call) adds; "" while a character
        is incomplete."""
        if len(ids) <= self._read:
            return ""
        before = self._decode(list(ids[self._prefix:self._read]))
        after = self._decode(list(ids[self._prefix:]))
        if len(after) <= len(before) or after.endswith(_INCOMPLETE):
            return ""
        delta = after[len(before):]
        self._prefix, self._read = self._read, len(ids)
        self.text += delta
        self.tokens = self._read
        return delta

    def pending(self, ids: Sequence[int]) -> str:
        """The text of the tokens `feed` holds back (those of an incomplete character), without the
        incomplete character: what the whole list's decode shows after self.text."""
        if len(ids) <= self._read:
            return ""
        before = self._decode(list(ids[self._prefix:self._read]))
        after = self._decode(list(ids[self._prefix:]))
        return after[len(before):].rstrip(_INCOMPLETE) if len(after) > len(before) else ""


class StopStrings:
    """A request's stop_check: the first stop string its generated text holds, else None. Only the
    text's tail is searched again after each token."""

    def __init__(self, decode: Decode, stops: Sequence[str]):
        self.stops = [s for s in stops if s]
        self._text = IncrementalText(decode)
        self._longest = max((len(s) for s in self.stops), default=0)
        self._failed = False

    def __call__(self, output_ids: Sequence[int]) -> Optional[str]:
        if self._failed or not self.stops:
            return None
        try:
            delta = self._text.feed(output_ids)
            # Text held back behind an incomplete character counts: the reply's decode shows it.
            new = delta or self._text.pending(output_ids)
        except Exception:  # never fails the scheduler: the reply is still cut at the stop afterwards
            log.exception("decoding for stop strings failed; this request runs to its token limit")
            self._failed = True
            return None
        if not new:
            return None
        text = self._text.text + ("" if delta else new)
        window = text[max(0, len(text) - len(new) - self._longest + 1):]
        hits = [(window.find(s), s) for s in self.stops if s in window]
        return min(hits)[1] if hits else None


def first_stop(text: str, stops: Sequence[str]) -> Optional[int]:
    """Where the first stop string in `text` begins, None when none is in it."""
    found = [text.find(s) for s in stops if s and s in text]
    return min(found) if found else None


def held_stop_prefix(text: str, stops: Sequence[str]) -> int:
    """Length of the longest tail of `text` that begins some stop string: text a stream must hold back,
    as the next tokens may complete the stop (and a stop string is never part of a reply)."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest


def tokens_holding(decode: Decode, ids: Sequence[int], chars: int) -> int:
    """The fewest leading ids whose text is at least `chars` long (len(ids) when none is): found by
    bisection, as the text of a prefix grows with it."""
    low, high = 0, len(ids)
    while low < high:
        middle = (low + high) // 2
        if len(decode(list(ids[:middle]))) >= chars:
            high = middle
        else:
            low = middle + 1
    return low
