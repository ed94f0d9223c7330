"""Constant folding for envs/grading/hack_detect.py: the value an expression built only from literals and
pure operations has, so a name spelled at run time ("mod" + "ules", "".join([...]), chr(...),
base64 of a literal) is seen as the name it spells. What it cannot fold cheaply raises
Unfoldable, and the caller judges the expression by what it reaches instead.

The folder runs in the host process on text the agent wrote, so it is bounded before it acts:
every value it keeps weighs at most _MAX_SIZE (deep: a list of lists counts every item), every
operation whose result can outgrow its operands (repetition, powers, shifts, joins, padding,
format widths, codecs) is refused when the estimate of what it would build exceeds _MAX_WORK,
an int never exceeds _MAX_INT_BITS (so a decimal conversion is cheap whatever the host's
int_max_str_digits), and steps are counted per expression and per file; a file past its
budget is `exhausted` (the caller decides what that means).
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
# The heaviest value kept (characters, bytes, items and int bytes, counted deep).
_MAX_SIZE = 4096
# The most one operation may build before its result is weighed (an estimate, refused above it).
_MAX_WORK = 1 << 16
# Ints beyond this are never a spelled name; below it str(int) stays under any host's digit limit.
_MAX_INT_BITS = 8192
# Steps per expression, and per file: every fold, weighing and estimated kilobyte costs one.
_FOLD_BUDGET = 5000
FILE_BUDGET = 200_000
# Codecs that decompress: a literal of kilobytes decodes to gigabytes.
_EXPANDING_CODECS = frozenset({"zlib", "bz2"})
_PURE_FUNCTIONS: Dict[str, Callable] = {
    "chr": chr, "ord": ord, "str": str, "bytes": bytes, "bytearray": bytearray, "int": int, "hex": hex,
    "oct": oct, "bin": bin, "list": list, "tuple": tuple, "reversed": lambda x: list(reversed(x)),
    "sorted": sorted, "format": format, "len": len, "abs": abs, "min": min, "max": max, "ascii": ascii,
    "repr": repr, "range": range, "zip": lambda *xs: list(zip(*xs)), "enumerate": lambda x: list(enumerate(x)),
    "sum": sum,
}
# Functions whose int arguments are values, not sizes (an int argument of any other callable is
# a length, a width or a count, and must stay under _MAX_SIZE).
_VALUE_ARGUMENTS = frozenset({"chr", "str", "hex", "oct", "bin", "int", "repr", "ascii", "abs", "format",
                              "min", "max", "sum", "range"})
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
_DIGITS = re.compile(r"\d+")


def weight(value, limit: int = _MAX_SIZE) -> Tuple[int, int]:
    """(how heavy `value` is, how many objects were visited), deep, stopping once past `limit`:
    an int counts its bytes (one past _MAX_INT_BITS weighs more than any limit), a string or bytes its length, a container one plus its items; a
    type this folder does not make weighs more than any limit."""
    total, visited, pending = 0, 0, [value]
    while pending and total <= limit:
        item = pending.pop()
        visited += 1
        if item is None or isinstance(item, (bool, float)) or callable(item):
            total += 1
        elif isinstance(item, int):
            if item.bit_length() > _MAX_INT_BITS:
                return limit + 1, visited
            total += item.bit_length() // 8 + 1
        elif isinstance(item, (str, bytes, bytearray)):
            total += len(item) + 1
        elif isinstance(item, range):
            try:
                total += len(item) + 1
            except OverflowError:
                return limit + 1, visited
        elif isinstance(item, (list, tuple, set, frozenset, dict)):
            total += len(item) + 1
            if total <= limit:
                pending.extend(item.items() if isinstance(item, dict) else item)
        else:
            return limit + 1, visited
    return total, visited


def _widest(*texts) -> int:
    """The largest number written in any of `texts` (a format width or precision), 0 if none."""
    widest = 0
    for text in texts:
        for digits in _DIGITS.findall(text if isinstance(text, str) else str(text)[:_MAX_WORK]):
            widest = max(widest, int(digits) if len(digits) <= 6 else _MAX_WORK + 1)
    return widest


def _codec_name(name) -> str:
    try:
        return codecs.lookup(name).name if isinstance(name, str) else ""
    except LookupError:
        return ""


class Folder:
    """Evaluates expressions built only from literals and pure operations on them; one per file."""

    def __init__(self, constants: Dict[str, ast.expr]):
        self.constants = constants
        self.memo: Dict[int, object] = {}
        # Values of nodes folded outside any lambda or comprehension: the same wherever they recur.
        self.known: Dict[int, object] = {}
        self.nodes: list = []
        self.budget = 0
        self.spent = 0
        self.exhausted = False

    def value(self, node: ast.AST):
        """The node's value, or NOT_FOLDED (always, once the file's budget is spent)."""
        key = id(node)
        if key not in self.memo:
            if self.exhausted:
                return NOT_FOLDED
            self.budget = _FOLD_BUDGET
            try:
                self.memo[key] = self.fold(node, {}, 0)
            except (Unfoldable, Exception):
                self.memo[key] = NOT_FOLDED
            self.nodes.append(node)  # kept alive, so its id is never another node's
        return self.memo[key]

    def charge(self, steps: int) -> None:
        self.budget -= steps
        self.spent += steps
        if self.spent > FILE_BUDGET:
            self.exhausted = True
        if self.budget < 0 or self.exhausted:
            raise Unfoldable

    def check(self, value):
        """`value` if it weighs at most _MAX_SIZE (its ints at most _MAX_INT_BITS)."""
        total, visited = weight(value)
        self.charge(visited // 8)
        if total > _MAX_SIZE:
            raise Unfoldable
        return value

    def expect(self, estimate: int) -> None:
        """Refuse an operation that would build more than _MAX_WORK; charge what it will build."""
        if estimate > _MAX_WORK:
            raise Unfoldable
        self.charge(estimate // 1024)

    def heft(self, *values) -> int:
        total = 0
        for value in values:
            found, visited = weight(value, _MAX_WORK)
            self.charge(visited // 8)
            total += found
        return total

    def fold(self, node, env, depth):
        self.charge(1)
        if depth > 60:
            raise Unfoldable
        if not env and id(node) in self.known:
            return self.known[id(node)]
        value = self.evaluate(node, env, depth)
        if not env:
            self.known[id(node)] = value
            self.nodes.append(node)
        return value

    def evaluate(self, node, env, depth):
        fold = lambda n: self.fold(n, env, depth + 1)  # noqa: E731
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (str, bytes, int, float, bool, type(None))):
                return self.check(node.value)
            raise Unfoldable
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in self.constants:
                return fold(self.constants[node.id])
            if node.id in _PURE_FUNCTIONS:
                # never the bare builtin: map(bytes, [10**9]) calls it too, so it is bounded alike
                return lambda *args, **kwargs: self.apply(node.id, list(args), kwargs)
            raise Unfoldable
        if isinstance(node, ast.JoinedStr):
            parts = [str(fold(part)) for part in node.values]
            self.expect(sum(len(part) for part in parts))
            return self.check("".join(parts))
        if isinstance(node, ast.FormattedValue):
            value = fold(node.value)
            spec = fold(node.format_spec) if node.format_spec is not None else ""
            self.expect(_widest(spec) + 10 * self.heft(value))
            if node.conversion in (115, 114, 97):
                value = {115: str, 114: repr, 97: ascii}[node.conversion](value)
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
            return self.check(ops[type(node.op)](operand))
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
        if not isinstance(first.target, (ast.Name, ast.Tuple)):
            raise Unfoldable
        for item in iterable:
            self.charge(1)
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
            if isinstance(left, int) and not isinstance(right, int):
                left, right = right, left
            if not isinstance(left, (int, float)) and isinstance(right, int):
                self.expect(self.heft(left) * max(right, 0))
            return self.check(left * right)
        if isinstance(op, (ast.Pow, ast.LShift)) and isinstance(left, int) and isinstance(right, int):
            if right < 0:
                if isinstance(op, ast.LShift):
                    raise Unfoldable
            elif isinstance(op, ast.Pow) and abs(left) > 1 and left.bit_length() * right > _MAX_INT_BITS:
                raise Unfoldable
            elif isinstance(op, ast.LShift) and left.bit_length() + right > _MAX_INT_BITS:
                raise Unfoldable
        elif isinstance(op, (ast.Pow, ast.LShift)) and not isinstance(left, float):
            raise Unfoldable
        if isinstance(op, ast.Mod) and isinstance(left, (str, bytes)):
            self.printf(left, right)
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mod: lambda a, b: a % b,
               ast.FloorDiv: lambda a, b: a // b, ast.Div: lambda a, b: a / b, ast.BitXor: lambda a, b: a ^ b,
               ast.BitOr: lambda a, b: a | b, ast.BitAnd: lambda a, b: a & b, ast.RShift: lambda a, b: a >> b,
               ast.Pow: lambda a, b: a ** b, ast.LShift: lambda a, b: a << b}
        return self.check(ops[type(op)](left, right))

    def printf(self, template, args) -> None:
        """Refuse `template % args` past its bound: `*` takes a width from the arguments, and every
        field may print the heaviest argument padded to the widest number in the template."""
        star = "*" if isinstance(template, str) else b"*"
        if star in template:
            raise Unfoldable
        fields = template.count("%" if isinstance(template, str) else b"%")
        text = template if isinstance(template, str) else template.decode("latin-1")
        self.expect(len(template) + fields * (_widest(text) + 10 * self.heft(args) + 16))

    def formatting(self, template, args, kwargs) -> None:
        """Refuse `template.format(...)` past its bound: widths may come from the arguments too."""
        values = [*args, *kwargs.values()]
        widest = _widest(template, *(v for v in values if isinstance(v, (str, int)) and not isinstance(v, bool)))
        self.expect(len(template) + template.count("{") * (widest + 10 * self.heft(*values) + 16))

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
        func = node.func
        if isinstance(func, ast.Name):
            if func.id == "map" and len(args) >= 2:
                return self.check([args[0](*items) for items in zip(*args[1:])])
            target = fold(func)
            if not callable(target):
                raise Unfoldable
            return self.check(target(*args, **kwargs))
        if isinstance(func, ast.Attribute):
            self.sizes(func.attr, args, kwargs)
        if isinstance(func, ast.Attribute):
            if isinstance(func.value, ast.Name) and (func.value.id, func.attr) in _DECODERS:
                if func.value.id == "codecs":
                    self.codec(args[1] if len(args) > 1 else kwargs.get("encoding", "utf-8"), *args[:1])
                return self.check(_DECODERS[func.value.id, func.attr](*args, **kwargs))
            if func.attr not in _PURE_METHODS:
                raise Unfoldable
            if isinstance(func.value, ast.Name) and func.value.id in ("str", "bytes", "bytearray", "int"):
                owner = {"str": str, "bytes": bytes, "bytearray": bytearray, "int": int}[func.value.id]
            else:
                owner = fold(func.value)
                if not isinstance(owner, (str, bytes, bytearray, int, list, tuple)):
                    raise Unfoldable
            self.method(owner, func.attr, args, kwargs)
            return self.check(getattr(owner, func.attr)(*args, **kwargs))
        raise Unfoldable

    def apply(self, name: str, args: list, kwargs: dict):
        """One of _PURE_FUNCTIONS called, bounded before it runs."""
        self.charge(1)
        self.sizes(name, args, kwargs)
        if name in ("str", "bytes", "bytearray") and len(args) > 1:
            self.codec(args[1], args[0])
        if name == "format" and len(args) > 1:
            self.expect(_widest(args[1]) + 10 * self.heft(args[0]))
        return self.check(_PURE_FUNCTIONS[name](*args, **kwargs))

    @staticmethod
    def sizes(name: str, args: list, kwargs: dict) -> None:
        if name not in _VALUE_ARGUMENTS and any(isinstance(v, int) and not isinstance(v, bool) and abs(v) > _MAX_SIZE
                                               for v in [*args, *kwargs.values()]):
            # bytes(n), "x".ljust(n), (1).to_bytes(n): a size, not a character code
            raise Unfoldable

    def codec(self, name, data=b"") -> None:
        """Refuse a codec that decompresses, or one this host does not know."""
        found = _codec_name(name)
        if not found or found in _EXPANDING_CODECS:
            raise Unfoldable
        self.expect(10 * self.heft(data))

    def method(self, owner, name: str, args: list, kwargs: dict) -> None:
        """Refuse a method call whose result would outgrow _MAX_WORK, before it is made."""
        size = self.heft(owner) if isinstance(owner, (str, bytes, bytearray, list, tuple)) else 0
        if name in ("format", "format_map") and isinstance(owner, str):
            self.formatting(owner, args, kwargs)
        elif name in ("encode", "decode"):
            self.codec(args[0] if args else kwargs.get("encoding", "utf-8"), owner)
        elif name == "join" and args:
            self.expect(self.heft(args[0]) + size * len(args[0]) if hasattr(args[0], "__len__") else _MAX_WORK + 1)
        elif name == "replace" and len(args) >= 2:
            self.expect(size + (size + 1) * self.heft(args[1]))
        elif name == "expandtabs":
            self.expect(size * max(args[0] if args else kwargs.get("tabsize", 8), 1))
        elif name == "translate" and args:
            table = args[0]
            heaviest = max((self.heft(v) for v in table.values()), default=1) if isinstance(table, dict) else 1
            self.expect(size * heaviest)
