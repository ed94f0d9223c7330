"""Values as the call recorder (recorder_plugin.py) sees them: plain JSON, a receiver's state, whether
a frame returned. Copied beside the plugin as swerve_recorder_values.py; standard library only,
since it runs under the repository's interpreter."""
import dis
import json
import math

# A value with more nodes than this is refused before it is encoded: its JSON would exceed any
# sensible per-call size anyway, and walking it must stay cheap.
_MAX_NODES = 512


def plain_json(value, max_chars):
    """JSON text of value when it is plain JSON by exact type and at most max_chars long, else None."""
    stack, nodes = [value], 0
    while stack:
        item = stack.pop()
        nodes += 1
        if nodes > _MAX_NODES:
            return None
        kind = type(item)
        if kind is float:
            if not math.isfinite(item):
                return None
        elif kind is list:
            stack.extend(item)
        elif kind is dict:
            if any(type(key) is not str for key in item):
                return None
            stack.extend(item.values())
        elif not (item is None or kind in (bool, int, str)):
            return None
    text = json.dumps(value)
    return text if len(text) <= max_chars else None


def state_of(obj, max_chars):
    """The receiver's attributes as compared between calls: plain JSON, or a value's identity."""
    kind, names = type(obj), []
    for klass in kind.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.extend(name for name in ([slots] if type(slots) is str else slots)
                      if name not in ("__dict__", "__weakref__"))
    values = {name: getattr(obj, name, UNSET) for name in names}  # a slot never set reads as UNSET
    if kind.__dictoffset__:
        values.update(object.__getattribute__(obj, "__dict__"))
    return sorted((name, plain_json(value, max_chars) or ("id", id(value))) for name, value in values.items())


UNSET = object()
# The result recorded for a call that raised (no JSON text starts with "!").
RAISED = "!raised"
THREW = object()  # what a pending call is given when it raised (a returned value cannot be it)
# Bytecode a function leaves through when it returns; any other last instruction raised.
_RETURN_OPS = {dis.opmap[name] for name in ("RETURN_VALUE", "RETURN_CONST") if name in dis.opmap}


def returned(frame):
    return frame.f_lasti >= 0 and frame.f_code.co_code[frame.f_lasti] in _RETURN_OPS


def resolve(root, qualname):
    for part in qualname.split("."):
        root = getattr(root, part, None)
    return root
