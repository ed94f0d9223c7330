"""Shortening, wrapping and padding text."""


def truncate(text, width, suffix="..."):
    """Cut text to at most width characters, ending with suffix when cut."""
    if len(text) <= width:
        return text
    return text[: width - len(suffix)] + suffix


def wrap(text, width):
    """Greedy word wrap into lines of at most width characters."""
    lines = []
    current = ""
    for word in text.split():
        candidate = word if not current else current + " " + word
        if len(candidate) <= width:
            current = candidate
        else:
            if current:
                lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def pad_center(text, width, fill=" "):
    """Center text in a field of width characters; odd extra fill goes on the right."""
    total = max(width - len(text), 0)
    left = total // 2
    return fill * left + text + fill * (total - left)
