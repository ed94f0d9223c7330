"""Parse INI-style text: [section] headers, key = value lines, # and ; comments."""


class ParseError(ValueError):
    def __init__(self, line_number, message):
        super().__init__(f"line {line_number}: {message}")
        self.line_number = line_number


def unquote(value):
    """Strip one pair of matching single or double quotes."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def parse(text):
    """Return {section: {key: value}}; keys before the first header go to section ""."""
    config = {"": {}}
    section = ""
    for line_number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            if not section:
                raise ParseError(line_number, "empty section name")
            config.setdefault(section, {})
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ParseError(line_number, f"expected 'key = value', got {line!r}")
        config[section][key.strip().lower()] = unquote(value.strip())
    return config
