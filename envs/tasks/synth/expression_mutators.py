"""Mutator families that change one expression: a comparison or binary operator, an integer
constant off by one, two adjacent call arguments swapped, `and` <-> `or`
(envs/tasks/synth/mutators.py lists every family)."""
from __future__ import annotations

import ast
import re
from typing import Iterator

from envs.tasks.synth.sites import Context, Mutation, find_token, short

def change_compare_op(ctx: Context) -> Iterator[Mutation]:
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
            span = find_token(gap, pattern)
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


def _has_str_operand(node: ast.BinOp) -> bool:
    return any(
        isinstance(side, ast.JoinedStr)
        or (isinstance(side, ast.Constant) and isinstance(side.value, (str, bytes)))
        for side in (node.left, node.right)
    )


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


def change_binary_op(ctx: Context) -> Iterator[Mutation]:
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
        span = find_token(ctx.text[gap_start:gap_end], _op_pattern(symbol, aug))
        if not span:
            continue
        new = ctx.rng.choice(_BINOP_ALTERNATIVES[symbol]) + ("=" if aug else "")
        old = symbol + ("=" if aug else "")
        m = ctx.mutation("change_binary_op", site, gap_start + span[0], gap_start + span[1],
                         new, f"operator `{old}` -> `{new}`")
        if m:
            yield m


def change_constant(ctx: Context) -> Iterator[Mutation]:
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


def swap_call_args(ctx: Context) -> Iterator[Mutation]:
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
                         f"arguments `{short(ta)}` and `{short(tb)}` of `{short(callee)}` swapped")
        if m:
            yield m


def change_bool_op(ctx: Context) -> Iterator[Mutation]:
    for site in ctx.sites:
        node = site.node
        if not isinstance(node, ast.BoolOp):
            continue
        symbol, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        options = []
        for i in range(len(node.values) - 1):
            gap_start = ctx.src.end(node.values[i])
            gap = ctx.text[gap_start : ctx.src.start(node.values[i + 1])]
            span = find_token(gap, rf"\b{symbol}\b")
            if span:
                options.append((gap_start + span[0], gap_start + span[1]))
        if not options:
            continue
        start, end = ctx.rng.choice(options)
        m = ctx.mutation("change_bool_op", site, start, end, new, f"`{symbol}` -> `{new}`")
        if m:
            yield m

