"""JSON that the agent, or code it controls, could have written, parsed as hostile input.

A reward file, a results file, a listing: the host must never be made to raise by one
(`json.loads` raises RecursionError on `[[[[...` 100k deep and ValueError on an int of more
than 4300 digits) nor to hold more of one than the caller bounds. `load_bounded` checks size,
UTF-8, nesting depth and integer length before and while parsing, and every way the text can
fail is one error, HostileJSONError (a ValueError), whose message says why: callers turn it into
the attempt's outcome. The shape of the value (a dict of numbers, a list of N entries) is the
caller's to check. It lives with the tasks, the lowest layer, so that every layer that reads
such files (hidden-case results here, grading's reward files and listing) can use it.
"""
from __future__ import annotations

import itertools
import json
import re
from typing import Any, Union

# Deep enough for any result the grading reads (a reward object, a results list of values).
DEFAULT_MAX_DEPTH = 32
# Longer integers are no reward, count or size; int() is quadratic in the digits.
DEFAULT_MAX_INT_DIGITS = 1000

# A string, or an unterminated one up to the end: every quote starts a match that never
# backtracks (possessive), so hostile text of many quotes and escapes stays linear.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class HostileJSONError(ValueError):
    """The text is not JSON within the bounds (size, encoding, depth, integer digits, syntax)."""


def load_bounded(data: Union[str, bytes], max_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH,
                 max_int_digits: int = DEFAULT_MAX_INT_DIGITS) -> Any:
    """The JSON value of `data`, or HostileJSONError saying why there is none. `data` is what was
    read (callers read at most max_bytes + 1 of a file, so a larger one is named, never held)."""
    if isinstance(data, str):
        size = len(data.encode("utf-8", errors="surrogatepass"))
        text = data
    elif isinstance(data, (bytes, bytearray)):
        size = len(data)
        text = None
    else:
        raise TypeError(f"load_bounded takes str or bytes, not {type(data).__name__}")
    if size > max_bytes:
        raise HostileJSONError(f"larger than {max_bytes} bytes")
    if text is None:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as error:
            raise HostileJSONError(f"not UTF-8 ({error.reason} at byte {error.start})") from error
    depth = nesting_depth(text)
    if depth > max_depth:
        raise HostileJSONError(f"nested deeper than {max_depth} levels")

    def parse_int(digits: str) -> int:
        count = len(digits.lstrip("-"))
        if count > max_int_digits:
            raise HostileJSONError(f"an integer of {count} digits, more than {max_int_digits}")
        return int(digits)

    try:
        return json.loads(text, parse_int=parse_int)
    except json.JSONDecodeError as error:
        raise HostileJSONError(f"not JSON: {error}") from error


def nesting_depth(text: str) -> int:
    """The deepest nesting of [ and { outside strings (linear, no recursion). Text that is not
    well-formed JSON may be judged deeper than it is: it fails to parse either way."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(itertools.accumulate(_STEP[c] for c in brackets), default=0)
