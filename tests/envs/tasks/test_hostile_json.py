"""What the agent can write is parsed as hostile input: every malformed text is one clear error,
never RecursionError, an int-digits ValueError or a host stall."""
import time

import pytest

from envs.tasks.hostile_json import HostileJSONError, load_bounded, nesting_depth


@pytest.mark.parametrize("text,value", [
    ('{"reward": 1.0}', {"reward": 1.0}), (b"[1, [2, [3]]]", [1, [2, [3]]]), ('"[[[[ not nesting"', "[[[[ not nesting"),
    ('{"a\\"[[[": [{}]}', {'a"[[[': [{}]}), ("NaN", None), ("-12", -12),
])
def test_well_formed_json_within_the_bounds_parses(text, value):
    parsed = load_bounded(text, 1000, max_depth=3)
    assert parsed == value or (value is None and parsed != parsed)


@pytest.mark.parametrize("text,why", [
    ("[" * 100_000 + "]" * 100_000, "nested deeper than 32"),
    ('{"a": ' * 50 + "1" + "}" * 50, "nested deeper than 32"),
    ("[" * 100_000, "nested deeper than 32"),
    ("1" * 5000, "an integer of 5000 digits"),
    ('{"reward": -' + "9" * 1001 + "}", "more than 1000"),
    (b"\xff\xfe{}", "not UTF-8"),
    ("x" * 2000, "larger than 1000 bytes"),
    ("{'reward': 1}", "not JSON"),
    ("", "not JSON"),
    ('"' + '\\"' * 300, "not JSON"),
])
def test_hostile_text_is_one_clear_error(text, why):
    limit = 1000 if why.startswith("larger") else 10 ** 7
    with pytest.raises(HostileJSONError, match=why):
        load_bounded(text, limit)


def test_the_error_is_a_value_error_so_existing_handlers_take_it():
    with pytest.raises(ValueError):
        load_bounded("[" * 5000, 10 ** 6)


def test_quotes_and_escapes_cannot_make_the_depth_scan_quadratic():
    hostile = '"' + '\\"' * 400_000 + "\\"
    started = time.monotonic()
    assert nesting_depth(hostile) == 0 and nesting_depth('[{"]": "["}]') == 2
    with pytest.raises(HostileJSONError):
        load_bounded(hostile, 10 ** 7)
    assert time.monotonic() - started < 2.0


def test_only_text_or_bytes_is_taken():
    with pytest.raises(TypeError, match="str or bytes"):
        load_bounded(["[]"], 100)
