"""The shortest readable edit between two versions of one line, as a `str.replace` pair.

Issues of the micro tasks quote it ("Probably `old` should be `new`") and the scripted expert
types it into `sed`: both must name the same few characters, so both call `minimal_edit`.
"""
from __future__ import annotations

import re

# Python-ish tokens: words, whitespace runs, and the two-character operators kept whole, so an
# edit never splits `<=` into `<` and `=`.
TOKEN = re.compile(r"\w+|\s+|//|\*\*|[<>=!]=|[^\w\s]")


def minimal_edit(line: str, target: str) -> tuple[str, str]:
    """(old, new) substrings so that replacing the first `old` in `line` by `new` gives `target`.

    Token-level common prefix/suffix, widened until both sides hold a word character, do not
    start or end with whitespace, and `old` first occurs at the edited position.
    """
    a, b = TOKEN.findall(line), TOKEN.findall(target)
    pre = 0
    while pre < min(len(a), len(b)) and a[pre] == b[pre]:
        pre += 1
    suf = 0
    while suf < min(len(a), len(b)) - pre and a[len(a) - 1 - suf] == b[len(b) - 1 - suf]:
        suf += 1
    lo, hi_a, hi_b = pre, len(a) - suf, len(b) - suf

    def segs():
        return "".join(a[lo:hi_a]), "".join(b[lo:hi_b])

    def ok(old: str, new: str) -> bool:
        for seg in (old, new):
            if len(seg) < 2 or seg != seg.strip() or not re.search(r"\w", seg):
                return False
        return line.find(old) == len("".join(a[:lo]))

    base = (lo, hi_a, hi_b)
    best = None
    for total in range(len(a) + 1):  # fewest extra tokens first, extending right before left
        for left in range(total + 1):
            right = total - left
            lo, hi_a, hi_b = base[0] - left, base[1] + right, base[2] + right
            if lo >= 0 and hi_a <= len(a) and ok(*segs()):
                best = (lo, hi_a, hi_b)
                break
        if best:
            break
    lo, hi_a, hi_b = best or (0, len(a), len(b))
    old, new = segs()
    if line.replace(old, new, 1) != target:
        raise ValueError(f"no minimal edit from {line!r} to {target!r}")
    return old, new
