"""Conversions between identifier cases."""


def snake_to_camel(name):
    """'parse_http_header' -> 'parseHttpHeader'."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def camel_to_snake(name):
    """'parseHttpHeader' -> 'parse_http_header'."""
    out = []
    for index, char in enumerate(name):
        if char.isupper() and index > 0:
            out.append("_")
        out.append(char.lower())
    return "".join(out)


def title_case(text, minor_words=("a", "an", "the", "of", "and")):
    """Capitalize words except minor ones; the first word is always capitalized."""
    result = []
    for index, word in enumerate(text.split()):
        if index > 0 and word.lower() in minor_words:
            result.append(word.lower())
        else:
            result.append(word.capitalize())
    return " ".join(result)
