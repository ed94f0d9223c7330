"""The one way a seed is derived from another: `derive_seed(base, *parts)`.

A run has one seed (run.seed, eval.seed); every random stream in it (a sampling request's draw,
an episode's fault plan, a generation of episode actors) takes a seed derived from a parent seed
and the integers that name the stream (a turn, a token count, an actor index). Hashing instead
of `base * PRIME + part` keeps the streams independent: with arithmetic, (base, part + PRIME) and
(base + 1, part) collide, and neighbouring seeds give correlated draws to generators that are
seeded linearly.
"""
from __future__ import annotations

import hashlib

# Seeds fit a signed 32-bit int: SGLang's sampling_seed and every other consumer take them.
SEED_LIMIT = 2**31


def derive_seed(base: int, *parts: int) -> int:
    """A seed in [0, 2**31) for the stream that `parts` names under `base`.

    Stable: the same arguments give the same seed in every process, Python version and machine
    (a hash of their decimal text, not Python's salted hash()). Independent: a different base,
    different parts or a different number of parts gives an unrelated seed, so
    derive_seed(s, t) for t = 0, 1, ... are separate streams, and derive_seed(s, t, k) is a
    stream apart from all of them. Any integers may be given, negative or beyond 64 bits."""
    text = ":".join(str(int(value)) for value in (base, *parts))
    digest = hashlib.blake2b(text.encode("ascii"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % SEED_LIMIT
