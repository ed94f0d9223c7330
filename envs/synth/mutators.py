"""Procedural bug mutators (SWE-smith style), standard library only.

Every mutation is a *minimal textual edit* of the original source: the AST is only used
to find sites and their exact source positions; the edit replaces one small span of the
original text (an operator, a constant, a condition, a block, a statement), so the rest
of the file -- formatting, comments -- is untouched and the resulting diff is small.

Families:

- ``change_compare_op``  ``<`` -> ``<=``, ``==`` -> ``!=``, ``in`` -> ``not in``, ...
- ``change_binary_op``   ``+`` -> ``-``, ``*`` -> ``/``, ``+=`` -> ``-=``, ...
- ``change_constant``    an integer literal off by one
- ``negate_condition``   ``if c:`` -> ``if not c:`` (also ``while`` and ``x if c else y``)
- ``swap_if_else``       exchange the bodies of ``if``/``else``
- ``remove_statement``   drop an assignment, a call statement or a ``return``/``raise`` guard
- ``swap_call_args``     exchange two adjacent positional call arguments
- ``change_bool_op``     ``and`` <-> ``or``

Everything is deterministic given (source, file name, seed).
"""

from __future__ import annotations

import ast
import bisect
import random
import re
from dataclasses import dataclass
from typing import Callable, Iterator

__all__ = [
    "FAMILIES",
    "Mutation",
    "SourceText",
    "find_mutations",
]


@dataclass(frozen=True)
class Mutation:
    """One candidate bug: ``new_text`` is the whole mutated file."""

    file: str
    description: str
    family: str
    new_text: str
    lineno: int = 0
    start: int = 0  # character offsets of the replaced span in the original text
    end: int = 0
    replacement: str = ""
    function: str = ""  # qualified name of the enclosing function ("" at module level)


# ---------------------------------------------------------------------------------------
# Source positions

_LINE_RE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


class SourceText:
    """Maps ast (lineno, utf-8 byte column) positions to character offsets in the text."""

    def __init__(self, text: str):
        self.text = text
        self.lines = _LINE_RE.findall(text)
        self.line_starts = [0]
        for line in self.lines:
            self.line_starts.append(self.line_starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        if lineno - 1 >= len(self.lines):
            return len(self.text)
        line = self.lines[lineno - 1]
        if not line.isascii():
            col = len(line.encode("utf-8")[:col].decode("utf-8", errors="replace"))
        return self.line_starts[lineno - 1] + col

    def start(self, node: ast.AST) -> int:
        return self.offset(node.lineno, node.col_offset)

    def end(self, node: ast.AST) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        return self.text[self.start(node) : self.end(node)]

    def line_start(self, lineno: int) -> int:
        return self.line_starts[min(lineno - 1, len(self.lines))]

    def line_end(self, lineno: int) -> int:
        """Offset just past the line's terminator."""
        return self.line_starts[min(lineno, len(self.lines))]

    def line_text(self, lineno: int) -> str:
        return self.lines[lineno - 1] if 0 < lineno <= len(self.lines) else ""

    def eol(self, lineno: int) -> str:
        line = self.line_text(lineno)
        return line[len(line.rstrip("\r\n")) :] or "\n"


# ---------------------------------------------------------------------------------------
# Traversal context


@dataclass
class _Site:
    node: ast.AST
    function: str  # enclosing function qualname, "" if none
    parent_block: list | None  # the statement list holding ``node`` (statements only)


class _Context:
    def __init__(self, text: str, tree: ast.AST, file: str, rng: random.Random):
        self._functions: set[tuple[str, ...]] = set()
        self.src = SourceText(text)
        self.text = text
        self.tree = tree
        self.file = file
        self.rng = rng
        self.sites: list[_Site] = []
        self._collect(tree, [], None)

    def _collect(self, node: ast.AST, scope: list[str], block: list | None) -> None:
        func = ".".join(scope)
        self.sites.append(_Site(node, func if _in_function(scope, self) else "", block))
        child_scope = scope
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            child_scope = scope + [node.name]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._functions.add(tuple(child_scope))
        for name, value in ast.iter_fields(node):
            if isinstance(value, list):
                is_block = bool(value) and all(isinstance(v, ast.stmt) for v in value)
                for item in value:
                    if isinstance(item, ast.AST):
                        self._collect(item, child_scope, value if is_block else None)
            elif isinstance(value, ast.AST):
                self._collect(value, child_scope, None)

    def mutation(self, family: str, site: _Site, start: int, end: int, replacement: str,
                 description: str) -> Mutation | None:
        old = self.text[start:end]
        if old == replacement:
            return None
        new_text = self.text[:start] + replacement + self.text[end:]
        try:
            ast.parse(new_text)
        except (SyntaxError, ValueError):
            return None
        lineno = _lineno_of(self.src, start)
        where = f" in `{site.function}`" if site.function else ""
        return Mutation(
            file=self.file,
            description=f"line {lineno}{where}: {description}",
            family=family,
            new_text=new_text,
            lineno=lineno,
            start=start,
            end=end,
            replacement=replacement,
            function=site.function,
        )


def _in_function(scope: list[str], ctx: _Context) -> bool:
    # the scope is "in a function" when any prefix of it names a function
    return any(tuple(scope[: i + 1]) in ctx._functions for i in range(len(scope)))


def _lineno_of(src: SourceText, offset: int) -> int:
    return max(1, min(bisect.bisect_right(src.line_starts, offset), len(src.lines) or 1))


def _find_token(gap: str, pattern: str) -> tuple[int, int] | None:
    """The single match of ``pattern`` in ``gap`` (text between two operands), or None."""
    if "#" in gap or "\\" in gap:
        return None
    matches = list(re.finditer(pattern, gap))
    if len(matches) != 1:
        return None
    return matches[0].span()


def _has_str_operand(node: ast.BinOp) -> bool:
    return any(
        isinstance(side, ast.JoinedStr)
        or (isinstance(side, ast.Constant) and isinstance(side.value, (str, bytes)))
        for side in (node.left, node.right)
    )


_ATOMIC = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant, ast.List,
           ast.Tuple, ast.Dict, ast.Set, ast.ListComp, ast.SetComp, ast.DictComp)


def _is_atomic(node: ast.AST, text: str) -> bool:
    if isinstance(node, ast.Tuple) and not text.startswith("("):
        return False
    return isinstance(node, _ATOMIC)


# ---------------------------------------------------------------------------------------
# Families


def _mut_compare(ctx: _Context) -> Iterator[Mutation]:
    table = {
        ast.Lt: (r"<(?![<=])", "<", ["<=", ">"]),
        ast.LtE: (r"<=", "<=", ["<", ">="]),
        ast.Gt: (r"(?<![-=>])>(?![>=])", ">", [">=", "<"]),
        ast.GtE: (r">=", ">=", [">", "<="]),
        ast.Eq: (r"==", "==", ["!="]),
        ast.NotEq: (r"!=", "!=", ["=="]),
        ast.Is: (r"\bis\b(?!\s+not\b)", "is", ["is not"]),
        ast.IsNot: (r"\bis\s+not\b", "is not", ["is"]),
        ast.In: (r"(?<!not )\bin\b", "in", ["not in"]),
        ast.NotIn: (r"\bnot\s+in\b", "not in", ["in"]),
    }
    for site in ctx.sites:
        node = site.node
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        options = []
        for i, op in enumerate(node.ops):
            pattern, symbol, alternatives = table[type(op)]
            gap_start = ctx.src.end(operands[i])
            gap = ctx.text[gap_start : ctx.src.start(operands[i + 1])]
            span = _find_token(gap, pattern)
            if span:
                options.append((gap_start + span[0], gap_start + span[1], symbol, alternatives))
        if not options:
            continue
        start, end, symbol, alternatives = ctx.rng.choice(options)
        new = ctx.rng.choice(alternatives)
        m = ctx.mutation("change_compare_op", site, start, end, new,
                         f"comparison `{symbol}` -> `{new}`")
        if m:
            yield m


_BINOPS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
    ast.Mod: "%", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|",
    ast.BitAnd: "&", ast.BitXor: "^",
}
_BINOP_ALTERNATIVES = {
    "+": ["-"], "-": ["+"], "*": ["+", "/"], "/": ["*", "//"], "//": ["/", "*"],
    "%": ["//"], "**": ["*"], "<<": [">>"], ">>": ["<<"], "|": ["&"], "&": ["|"],
    "^": ["|", "&"],
}


def _op_pattern(symbol: str, aug: bool) -> str:
    core = re.escape(symbol)
    if aug:
        return rf"(?<![*/<>]){core}="
    return rf"(?<![*/<>=!]){core}(?![*/<>=])"


def _mut_binop(ctx: _Context) -> Iterator[Mutation]:
    for site in ctx.sites:
        node = site.node
        if isinstance(node, ast.BinOp):
            symbol = _BINOPS.get(type(node.op))
            if symbol is None or _has_str_operand(node):
                continue
            gap_start, gap_end = ctx.src.end(node.left), ctx.src.start(node.right)
            aug = False
        elif isinstance(node, ast.AugAssign):
            symbol = _BINOPS.get(type(node.op))
            if symbol is None or (isinstance(node.value, (ast.Constant, ast.JoinedStr))
                                  and isinstance(getattr(node.value, "value", ""), (str, bytes))):
                continue
            gap_start, gap_end = ctx.src.end(node.target), ctx.src.start(node.value)
            aug = True
        else:
            continue
        span = _find_token(ctx.text[gap_start:gap_end], _op_pattern(symbol, aug))
        if not span:
            continue
        new = ctx.rng.choice(_BINOP_ALTERNATIVES[symbol]) + ("=" if aug else "")
        old = symbol + ("=" if aug else "")
        m = ctx.mutation("change_binary_op", site, gap_start + span[0], gap_start + span[1],
                         new, f"operator `{old}` -> `{new}`")
        if m:
            yield m


def _annotation_nodes(tree: ast.AST) -> set[int]:
    """ids of nodes inside type annotations (their constants are not worth mutating)."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        anns = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            anns.append(node.returns)
        elif isinstance(node, ast.arg):
            anns.append(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            anns.append(node.annotation)
        for ann in anns:
            if ann is not None:
                ids.update(id(sub) for sub in ast.walk(ann))
    return ids


def _mut_constant(ctx: _Context) -> Iterator[Mutation]:
    for site in ctx.sites:
        node = site.node
        if not (isinstance(node, ast.Constant) and type(node.value) is int):
            continue
        old_text = ctx.src.segment(node)
        if not re.fullmatch(r"[0-9][0-9_xXoObBa-fA-F]*", old_text):
            continue
        value = node.value
        new_value = value + 1 if value == 0 else value + ctx.rng.choice([1, -1])
        new = str(new_value)
        m = ctx.mutation("change_constant", site, ctx.src.start(node), ctx.src.end(node), new,
                         f"constant `{old_text}` -> `{new}`")
        if m:
            yield m


def _mut_negate(ctx: _Context) -> Iterator[Mutation]:
    for site in ctx.sites:
        node = site.node
        if not isinstance(node, (ast.If, ast.While, ast.IfExp)):
            continue
        test = node.test
        text = ctx.src.segment(test)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = ctx.src.segment(test.operand)
            new = inner if _is_atomic(test.operand, inner) else f"({inner})"
        else:
            new = f"not {text}" if _is_atomic(test, text) else f"not ({text})"
        kind = {ast.If: "if", ast.While: "while", ast.IfExp: "conditional expression"}[type(node)]
        m = ctx.mutation("negate_condition", site, ctx.src.start(test), ctx.src.end(test), new,
                         f"{kind} condition `{_short(text)}` negated")
        if m:
            yield m


def _block_first_line(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", None) or []
    return min([stmt.lineno] + [d.lineno for d in decorators])


def _is_elif(ctx: _Context, node: ast.If) -> bool:
    return (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)
            and ctx.src.line_text(node.orelse[0].lineno).lstrip().startswith("elif"))


def _mut_swap_if_else(ctx: _Context) -> Iterator[Mutation]:
    for site in ctx.sites:
        node = site.node
        if not isinstance(node, ast.If) or not node.orelse or _is_elif(ctx, node):
            continue
        body, orelse = node.body, node.orelse
        body_first, else_first = _block_first_line(body[0]), _block_first_line(orelse[0])
        if body_first <= node.test.end_lineno or body[0].col_offset != orelse[0].col_offset:
            continue
        # the `else:` line sits strictly between the two blocks
        else_lines = [ln for ln in range(body[-1].end_lineno + 1, else_first)
                      if ctx.src.line_text(ln).strip().startswith("else")]
        if len(else_lines) != 1:
            continue
        # block ends must be line ends (nothing but a comment after the last statement)
        if not (_ends_line(ctx, body[-1]) and _ends_line(ctx, orelse[-1])):
            continue
        a0, a1 = ctx.src.line_start(body_first), ctx.src.line_end(body[-1].end_lineno)
        b0, b1 = ctx.src.line_start(else_first), ctx.src.line_end(orelse[-1].end_lineno)
        block_a, middle, block_b = ctx.text[a0:a1], ctx.text[a1:b0], ctx.text[b0:b1]
        if block_a.strip() == block_b.strip():
            continue
        eol = ctx.src.eol(body[-1].end_lineno)
        if not block_b.endswith(("\n", "\r")):
            block_b += eol
            block_a = block_a.rstrip("\r\n")
        new = block_b + middle + block_a
        m = ctx.mutation("swap_if_else", site, a0, b1, new,
                         f"bodies of `if {_short(ctx.src.segment(node.test))}` / `else` swapped")
        if m:
            yield m


def _ends_line(ctx: _Context, node: ast.AST) -> bool:
    rest = ctx.text[ctx.src.end(node) : ctx.src.line_end(node.end_lineno)]
    rest = rest.strip()
    return not rest or rest.startswith("#")


def _starts_line(ctx: _Context, node: ast.AST) -> bool:
    return not ctx.text[ctx.src.line_start(node.lineno) : ctx.src.start(node)].strip()


def _is_guard(node: ast.AST) -> bool:
    return (isinstance(node, ast.If) and not node.orelse and len(node.body) == 1
            and isinstance(node.body[0], (ast.Return, ast.Raise, ast.Continue, ast.Break)))


def _mut_remove(ctx: _Context) -> Iterator[Mutation]:
    for site in ctx.sites:
        node = site.node
        if not site.function or site.parent_block is None:
            continue
        if isinstance(node, (ast.Assign, ast.AugAssign)) or (
                isinstance(node, ast.AnnAssign) and node.value is not None):
            what = "assignment"
        elif isinstance(node, ast.Expr) and isinstance(
                node.value.value if isinstance(node.value, ast.Await) else node.value, ast.Call):
            what = "call statement"
        elif _is_guard(node):
            what = f"`{type(node.body[0]).__name__.lower()}` guard"
        else:
            continue
        if not (_starts_line(ctx, node) and _ends_line(ctx, node)):
            continue
        start, end = ctx.src.line_start(node.lineno), ctx.src.line_end(node.end_lineno)
        siblings = [s for s in site.parent_block if s is not node]
        if not siblings:
            indent = ctx.src.line_text(node.lineno)[: node.col_offset]
            if not indent.strip() == "":
                continue
            replacement = indent + "pass" + ctx.src.eol(node.end_lineno)
        else:
            # a statement sharing a line with a sibling (`a = 1; b = 2`) cannot be dropped by line
            if any(s.end_lineno >= node.lineno and s.lineno <= node.end_lineno for s in siblings):
                continue
            replacement = ""
        first = ctx.src.line_text(node.lineno).strip()
        m = ctx.mutation("remove_statement", site, start, end, replacement,
                         f"removed {what} `{_short(first)}`")
        if m:
            yield m


def _mut_swap_args(ctx: _Context) -> Iterator[Mutation]:
    for site in ctx.sites:
        node = site.node
        if not isinstance(node, ast.Call) or len(node.args) < 2:
            continue
        if any(isinstance(a, ast.Starred) for a in node.args):
            continue
        pairs = []
        for i in range(len(node.args) - 1):
            a, b = node.args[i], node.args[i + 1]
            if ctx.src.segment(a) != ctx.src.segment(b):
                pairs.append((a, b))
        if not pairs:
            continue
        a, b = ctx.rng.choice(pairs)
        a0, a1, b0, b1 = ctx.src.start(a), ctx.src.end(a), ctx.src.start(b), ctx.src.end(b)
        between = ctx.text[a1:b0]
        if "#" in between:
            continue
        ta, tb = ctx.text[a0:a1], ctx.text[b0:b1]
        callee = ctx.src.segment(node.func)
        m = ctx.mutation("swap_call_args", site, a0, b1, tb + between + ta,
                         f"arguments `{_short(ta)}` and `{_short(tb)}` of `{_short(callee)}` swapped")
        if m:
            yield m


def _mut_boolop(ctx: _Context) -> Iterator[Mutation]:
    for site in ctx.sites:
        node = site.node
        if not isinstance(node, ast.BoolOp):
            continue
        symbol, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        options = []
        for i in range(len(node.values) - 1):
            gap_start = ctx.src.end(node.values[i])
            gap = ctx.text[gap_start : ctx.src.start(node.values[i + 1])]
            span = _find_token(gap, rf"\b{symbol}\b")
            if span:
                options.append((gap_start + span[0], gap_start + span[1]))
        if not options:
            continue
        start, end = ctx.rng.choice(options)
        m = ctx.mutation("change_bool_op", site, start, end, new, f"`{symbol}` -> `{new}`")
        if m:
            yield m


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


_FAMILY_FUNCS: dict[str, Callable[[_Context], Iterator[Mutation]]] = {
    "change_compare_op": _mut_compare,
    "change_binary_op": _mut_binop,
    "change_constant": _mut_constant,
    "negate_condition": _mut_negate,
    "swap_if_else": _mut_swap_if_else,
    "remove_statement": _mut_remove,
    "swap_call_args": _mut_swap_args,
    "change_bool_op": _mut_boolop,
}
FAMILIES: tuple[str, ...] = tuple(_FAMILY_FUNCS)


def _skipped_region_ids(tree: ast.AST) -> set[int]:
    """Nodes under ``if __name__ == "__main__":`` / ``if TYPE_CHECKING:`` blocks."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if ("__name__" in test and "__main__" in test) or test.endswith("TYPE_CHECKING"):
                ids.update(id(sub) for sub in ast.walk(node))
    return ids


def find_mutations(source: str, file: str = "<string>", seed: int = 0,
                   families: tuple[str, ...] | list[str] | None = None) -> list[Mutation]:
    """All candidate mutations of ``source`` (one per site and family), deterministic.

    Sites are visited in source order; where a site offers a choice (which operator of a
    chained comparison, which replacement operator, +1 or -1, which argument pair) it is
    drawn from a ``random.Random`` seeded with (seed, file, family). Every returned
    mutation parses. Returns [] for a file that does not parse.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    skip = _skipped_region_ids(tree) | _annotation_nodes(tree)
    out: list[Mutation] = []
    for family in families or FAMILIES:
        rng = random.Random(f"{seed}:{file}:{family}")
        ctx = _Context(source, tree, file, rng)
        ctx.sites = [s for s in ctx.sites if id(s.node) not in skip]
        out.extend(_FAMILY_FUNCS[family](ctx))
    return out
