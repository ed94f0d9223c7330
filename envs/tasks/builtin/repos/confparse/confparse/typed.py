"""Typed access to parsed configs, and layering of several configs."""
from confparse.parser import parse

TRUE_WORDS = {"1", "yes", "true", "on"}
FALSE_WORDS = {"0", "no", "false", "off"}


def lookup(config, section, key, default=None):
    """The raw string value of `key` in `section`, or `default`."""
    return config.get(section, {}).get(key, default)


def get_bool(config, section, key, default=False):
    value = lookup(config, section, key)
    if value is None:
        return default
    word = value.lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"{section}.{key}: not a boolean: {value!r}")


def get_int(config, section, key, default=0, minimum=None):
    raw = lookup(config, section, key)
    number = default if raw is None else int(raw)
    if minimum is not None and number < minimum:
        raise ValueError(f"{section}.{key} = {number} is below the minimum {minimum}")
    return number


def get_list(config, section, key, separator=","):
    """"a, b,, c" -> ["a", "b", "c"]; a missing key gives []."""
    value = lookup(config, section, key, "")
    items = [item.strip() for item in value.split(separator)]
    return [item for item in items if item]


def merge(base, override):
    """A new config: every section of `base`, with keys from `override` taking precedence."""
    merged = {name: dict(values) for name, values in base.items()}
    for name, values in override.items():
        merged.setdefault(name, {}).update(values)
    return merged


def load_layers(defaults_text, user_text):
    """Parse the defaults and the user's file; the user's values win."""
    return merge(parse(defaults_text), parse(user_text))
