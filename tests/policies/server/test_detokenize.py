"""Text while it is generated (policies/server/detokenize.py): deltas that add up to the whole decode, and
the stop string found at the token that completes it."""
import random

from policies.server.detokenize import IncrementalText, StopStrings, held_stop_prefix, text_decoder, tokens_holding


def random_ids(tokenizer, seed, n=300):
    generator = random.Random(seed)
    return [generator.randrange(len(tokenizer)) for _ in range(n)]


def test_deltas_add_up_to_the_whole_decode(tokenizer):
    decode = text_decoder(tokenizer)
    # Random ids split UTF-8 characters across tokens (the byte-level vocabulary has partial bytes).
    for seed in range(5):
        ids = random_ids(tokenizer, seed)
        text = IncrementalText(decode)
        pieces = [text.feed(ids[:n]) for n in range(1, len(ids) + 1)]
        whole = decode(ids)
        assert "".join(pieces) == text.text and whole.startswith(text.text)
        assert text.text + text.pending(ids) == whole.rstrip("\ufffd")


def test_a_stop_string_is_found_at_the_token_that_completes_it(tokenizer):
    decode = text_decoder(tokenizer)
    ids = tokenizer.encode("def count_points(xs):\n    return len(xs) + 1  # off by one")
    check = StopStrings(decode, ["never", "len("])
    found = [check(ids[:n]) for n in range(1, len(ids) + 1)]
    first = next(n for n, hit in enumerate(found, 1) if hit)
    assert found[first - 1] == "len(" and first == tokens_holding(decode, ids, decode(ids).find("len(") + 4)
    assert "len(" in decode(ids[:first]) and "len(" not in decode(ids[:first - 1])


def test_what_may_begin_a_stop_string_is_held():
    assert held_stop_prefix("abc </tool", ["</tool_call>"]) == 6
    assert held_stop_prefix("abc", ["cd", "bcx"]) == 2 and held_stop_prefix("abc", ["x"]) == 0
