"""The exec channel's frames: what the host writes the server reads back, and partial or
garbled input is told apart from a whole frame."""
import io

import pytest

from envs.sandboxes.jail.framing import encode_frame, read_frame, split_frame


def test_a_frame_round_trips_through_the_stream_and_the_buffer_reader():
    payload = "echo 'a\nb' && printf 'caf\u00e9'".encode()
    frame = encode_frame([20.0, 1000000], payload)
    assert read_frame(io.BytesIO(frame)) == (["20.0", "1000000"], payload)
    assert split_frame(frame + b"next") == (["20.0", "1000000"], payload, b"next")


def test_a_partial_frame_waits_for_the_rest_and_an_ended_stream_is_none():
    frame = encode_frame(["0", "0"], b"x" * 100)
    for cut in (0, 5, len(frame) - 1):
        assert split_frame(frame[:cut]) is None
        assert read_frame(io.BytesIO(frame[:cut])) is None


def test_a_stream_of_garbage_is_refused_not_waited_for():
    with pytest.raises(ValueError, match="no frame header"):
        split_frame(b"x" * 10000)
    with pytest.raises(ValueError):
        split_frame(b"0 0 notanumber\n")
