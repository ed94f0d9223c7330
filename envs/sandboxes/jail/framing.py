"""The exec channel's frames: a header line of space-separated fields ending in the payload's
length in bytes, then the payload. Standard library free: json would cost the jail's start ~18 ms.
"""
from __future__ import annotations

_MAX_HEADER_BYTES = 4096


def encode_frame(fields: list, payload: bytes) -> bytes:
    return " ".join(str(field) for field in [*fields, len(payload)]).encode() + b"\n" + payload


def write_frame(stream, fields: list, payload: bytes) -> None:
    stream.write(encode_frame(fields, payload))
    stream.flush()


def read_frame(stream):
    """(fields as str, payload) from a blocking binary stream; None at its end."""
    line = stream.readline(_MAX_HEADER_BYTES)
    if not line:
        return None
    *fields, length = line.decode().split()
    payload = stream.read(int(length))
    if len(payload) != int(length):
        return None  # the stream ended inside the frame
    return fields, payload


def split_frame(buffer: bytes):
    """(fields, payload, the rest) when buffer holds a whole frame, else None.

    Raises ValueError for a header that is not one."""
    end = buffer.find(b"\n", 0, _MAX_HEADER_BYTES + 1)
    if end < 0:
        if len(buffer) > _MAX_HEADER_BYTES:
            raise ValueError(f"no frame header in {buffer[:200]!r}")
        return None
    *fields, length = buffer[:end].decode("utf-8", errors="replace").split()
    start, stop = end + 1, end + 1 + int(length)
    if len(buffer) < stop:
        return None
    return fields, buffer[start:stop], buffer[stop:]
