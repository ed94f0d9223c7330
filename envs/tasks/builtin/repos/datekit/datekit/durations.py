"""Compact duration strings such as "1h30m" <-> seconds."""

UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text):
    """"1h30m" -> 5400. Units: d, h, m, s; every number needs a unit."""
    total = 0
    number = ""
    for char in text.strip():
        if char.isdigit():
            number += char
        elif char in UNIT_SECONDS and number:
            total += int(number) * UNIT_SECONDS[char]
            number = ""
        else:
            raise ValueError(f"bad duration {text!r} at {char!r}")
    if number:
        raise ValueError(f"bad duration {text!r}: number without a unit")
    return total


def format_duration(seconds):
    """5400 -> "1h30m"; zero units are left out; 0 -> "0s"."""
    if seconds == 0:
        return "0s"
    parts = []
    for unit, size in UNIT_SECONDS.items():
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
