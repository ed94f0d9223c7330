"""Constant folding for envs/grading/hack_detect.py: the value an expression built only from literals and
pure operations has, so a name spelled at run time ("mod" + "ules", "".join([...]), chr(...),
base64 of a literal) is seen as the name it spells. Bounded in size and steps: what it cannot
fold cheaply raises Unfoldable, and the caller judges the expression by what it reaches instead.
"""
from __future__ import annotations

import ast
import base64
import binascii
import codecs
import re
from typing import Callable, Dict, Iterator, Tuple

class Unfoldable(Exception):
    """The expression is not a constant this folder evaluates within its bounds."""


NOT_FOLDED = object()
_MAX_SIZE = 4096
_FOLD_BUDGET = 5000
_PURE_FUNCTIONS: Dict[str, Callable] = {
    "chr": chr, "ord": ord, "str": str, "bytes": bytes, "bytearray": bytearray, "int": int, "hex": hex,
    "oct": oct, "bin": bin, "list": list, "tuple": tuple, "reversed": lambda x: list(reversed(x)),
    "sorted": sorted, "format": format, "len": len, "abs": abs, "min": min, "max": max, "ascii": ascii,
    "repr": repr, "range": range, "zip": lambda *xs: list(zip(*xs)), "enumerate": lambda x: list(enumerate(x)),
    "sum": sum,
}
_PURE_METHODS = frozenset({
    "join", "decode", "encode", "lower", "upper", "casefold", "swapcase", "title", "capitalize", "replace",
    "strip", "lstrip", "rstrip", "format", "fromhex", "to_bytes", "from_bytes", "removeprefix", "removesuffix",
    "translate", "maketrans", "split", "rsplit", "center", "ljust", "rjust", "zfill", "hex", "partition",
    "rpartition", "splitlines", "expandtabs", "format_map", "copy", "count", "index", "find",
})
_DECODERS: Dict[Tuple[str, str], Callable] = {
    ("codecs", "decode"): codecs.decode, ("codecs", "encode"): codecs.encode,
    ("base64", "b64decode"): base64.b64decode, ("base64", "b32decode"): base64.b32decode,
    ("base64", "b16decode"): base64.b16decode, ("base64", "b85decode"): base64.b85decode,
    ("base64", "a85decode"): base64.a85decode, ("base64", "urlsafe_b64decode"): base64.urlsafe_b64decode,
    ("base64", "standard_b64decode"): base64.standard_b64decode, ("binascii", "unhexlify"): binascii.unhexlify,
    ("binascii", "a2b_base64"): binascii.a2b_base64, ("binascii", "a2b_hex"): binascii.a2b_hex,
}
_BIG_NUMBER = re.compile(r"\d{5,}")


def _size(value) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value.bit_length() // 8
    if isinstance(value, (str, bytes, bytearray, list, tuple, range, set, frozenset, dict)):
        return len(value)
    return 0


class Folder:
    """Evaluates expressions built only from literals and pure operations on them."""

    def __init__(self, constants: Dict[str, ast.expr]):
        self.constants = constants
        self.memo: Dict[int, object] = {}
        self.budget = 0

    def value(self, node: ast.AST):
        """The node's value, or NOT_FOLDED."""
        key = id(node)
        if key not in self.memo:
            self.budget = _FOLD_BUDGET
            try:
                self.memo[key] = self.fold(node, {}, 0)
            except (Unfoldable, Exception):
                self.memo[key] = NOT_FOLDED
        return self.memo[key]

    def check(self, value):
        if _size(value) > _MAX_SIZE:
            raise Unfoldable
        return value

    def fold(self, node, env, depth):
        self.budget -= 1
        if self.budget < 0 or depth > 60:
            raise Unfoldable
        fold = lambda n: self.fold(n, env, depth + 1)  # noqa: E731
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (str, bytes, int, float, bool, type(None))):
                return node.value
            raise Unfoldable
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in self.constants:
                return fold(self.constants[node.id])
            if node.id in _PURE_FUNCTIONS:
                return _PURE_FUNCTIONS[node.id]
            raise Unfoldable
        if isinstance(node, ast.JoinedStr):
            return self.check("".join(str(fold(part)) for part in node.values))
        if isinstance(node, ast.FormattedValue):
            value = fold(node.value)
            if node.conversion == 115:
                value = str(value)
            elif node.conversion == 114:
                value = repr(value)
            elif node.conversion == 97:
                value = ascii(value)
            spec = fold(node.format_spec) if node.format_spec is not None else ""
            if _BIG_NUMBER.search(str(spec)):
                raise Unfoldable
            return self.check(format(value, spec))
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = []
            for element in node.elts:
                if isinstance(element, ast.Starred):
                    items.extend(fold(element.value))
                else:
                    items.append(fold(element))
            return self.check(tuple(items) if isinstance(node, ast.Tuple) else items)
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, fold(node.left), fold(node.right))
        if isinstance(node, ast.UnaryOp):
            operand = fold(node.operand)
            ops = {ast.USub: lambda v: -v, ast.UAdd: lambda v: +v, ast.Invert: lambda v: ~v, ast.Not: lambda v: not v}
            return ops[type(node.op)](operand)
        if isinstance(node, ast.Subscript):
            value = fold(node.value)
            if isinstance(node.slice, ast.Slice):
                parts = [fold(p) if p is not None else None for p in (node.slice.lower, node.slice.upper, node.slice.step)]
                return self.check(value[slice(*parts)])
            return self.check(value[fold(node.slice)])
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return self.check(list(self.comprehension(node, node.generators, env, depth)))
        if isinstance(node, ast.Lambda):
            params = [a.arg for a in node.args.args]
            body = node.body
            return lambda *args: self.fold(body, {**env, **dict(zip(params, args))}, depth + 1)
        if isinstance(node, ast.Call):
            return self.call(node, env, depth)
        raise Unfoldable

    def comprehension(self, node, generators, env, depth) -> Iterator:
        first, rest = generators[0], generators[1:]
        iterable = self.fold(first.iter, env, depth + 1)
        if _size(iterable) > _MAX_SIZE or not isinstance(first.target, (ast.Name, ast.Tuple)):
            raise Unfoldable
        for item in iterable:
            self.budget -= 1
            if self.budget < 0:
                raise Unfoldable
            inner = dict(env)
            if isinstance(first.target, ast.Name):
                inner[first.target.id] = item
            else:
                names = [t.id for t in first.target.elts if isinstance(t, ast.Name)]
                if len(names) != len(first.target.elts):
                    raise Unfoldable
                inner.update(zip(names, item))
            if all(self.fold(cond, inner, depth + 1) for cond in first.ifs):
                if rest:
                    yield from self.comprehension(node, rest, inner, depth)
                else:
                    yield self.fold(node.elt, inner, depth + 1)

    def binop(self, op, left, right):
        if isinstance(op, ast.Mult):
            both_ints = isinstance(left, int) and isinstance(right, int)
            if not both_ints and (_size(left) * (right if isinstance(right, int) else 1) > _MAX_SIZE or
                                  _size(right) * (left if isinstance(left, int) else 1) > _MAX_SIZE):
                raise Unfoldable
            return self.check(left * right)
        if isinstance(op, ast.Pow):
            if not isinstance(right, int) or abs(right) > 64 or _size(left) > 8:
                raise Unfoldable
            return self.check(left ** right)
        if isinstance(op, ast.LShift):
            if not isinstance(right, int) or right > 256:
                raise Unfoldable
            return left << right
        if isinstance(op, ast.Mod) and isinstance(left, (str, bytes)) and _BIG_NUMBER.search(str(left)):
            raise Unfoldable
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mod: lambda a, b: a % b,
               ast.FloorDiv: lambda a, b: a // b, ast.Div: lambda a, b: a / b, ast.BitXor: lambda a, b: a ^ b,
               ast.BitOr: lambda a, b: a | b, ast.BitAnd: lambda a, b: a & b, ast.RShift: lambda a, b: a >> b}
        return self.check(ops[type(op)](left, right))

    def call(self, node: ast.Call, env, depth):
        fold = lambda n: self.fold(n, env, depth + 1)  # noqa: E731
        args: list = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                args.extend(fold(arg.value))
            else:
                args.append(fold(arg))
        kwargs = {k.arg: fold(k.value) for k in node.keywords if k.arg is not None}
        if len(kwargs) != len(node.keywords):
            raise Unfoldable
        for value in list(args) + list(kwargs.values()):
            if isinstance(value, int) and not isinstance(value, bool) and value > 10 ** 6 and not callable(value):
                # bytes(n), "x".ljust(n): a size, not a character code
                is_code = (isinstance(node.func, ast.Attribute) and node.func.attr == "to_bytes") or \
                    (isinstance(node.func, ast.Name) and node.func.id in ("chr", "str", "hex", "oct", "bin"))
                if not is_code:
                    raise Unfoldable
        func = node.func
        if isinstance(func, ast.Name):
            if func.id == "map" and len(args) >= 2:
                return self.check([args[0](*items) for items in zip(*args[1:])])
            if func.id in ("bytes", "bytearray", "range") and args and isinstance(args[0], int) and args[0] > _MAX_SIZE:
                raise Unfoldable
            target = fold(func)
            if not callable(target):
                raise Unfoldable
            return self.check(target(*args, **kwargs))
        if isinstance(func, ast.Attribute):
            if isinstance(func.value, ast.Name) and (func.value.id, func.attr) in _DECODERS:
                return self.check(_DECODERS[func.value.id, func.attr](*args, **kwargs))
            if func.attr not in _PURE_METHODS:
                raise Unfoldable
            if isinstance(func.value, ast.Name) and func.value.id in ("str", "bytes", "bytearray", "int"):
                owner = {"str": str, "bytes": bytes, "bytearray": bytearray, "int": int}[func.value.id]
            else:
                owner = fold(func.value)
                if not isinstance(owner, (str, bytes, bytearray, int, list, tuple)):
                    raise Unfoldable
            if func.attr in ("format", "format_map") and any(_BIG_NUMBER.search(str(v)) for v in [owner, *args]):
                raise Unfoldable
            return self.check(getattr(owner, func.attr)(*args, **kwargs))
        raise Unfoldable
