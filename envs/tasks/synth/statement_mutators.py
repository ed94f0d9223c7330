"""Mutator families that change a statement or a branch: a condition negated, the bodies of
`if`/`else` exchanged, an assignment, call or guard removed (envs/tasks/synth/mutators.py lists
every family)."""
from __future__ import annotations

import ast
from typing import Iterator

from envs.tasks.synth.sites import Context, Mutation, is_atomic, short

def negate_condition(ctx: Context) -> Iterator[Mutation]:
    for site in ctx.sites:
        node = site.node
        if not isinstance(node, (ast.If, ast.While, ast.IfExp)):
            continue
        test = node.test
        text = ctx.src.segment(test)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = ctx.src.segment(test.operand)
            new = inner if is_atomic(test.operand, inner) else f"({inner})"
        else:
            new = f"not {text}" if is_atomic(test, text) else f"not ({text})"
        kind = {ast.If: "if", ast.While: "while", ast.IfExp: "conditional expression"}[type(node)]
        m = ctx.mutation("negate_condition", site, ctx.src.start(test), ctx.src.end(test), new,
                         f"{kind} condition `{short(text)}` negated")
        if m:
            yield m


def _block_first_line(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", None) or []
    return min([stmt.lineno] + [d.lineno for d in decorators])


def _is_elif(ctx: Context, node: ast.If) -> bool:
    return (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)
            and ctx.src.line_text(node.orelse[0].lineno).lstrip().startswith("elif"))


def swap_if_else(ctx: Context) -> Iterator[Mutation]:
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
                         f"bodies of `if {short(ctx.src.segment(node.test))}` / `else` swapped")
        if m:
            yield m


def _ends_line(ctx: Context, node: ast.AST) -> bool:
    rest = ctx.text[ctx.src.end(node) : ctx.src.line_end(node.end_lineno)]
    rest = rest.strip()
    return not rest or rest.startswith("#")


def _starts_line(ctx: Context, node: ast.AST) -> bool:
    return not ctx.text[ctx.src.line_start(node.lineno) : ctx.src.start(node)].strip()


def _is_guard(node: ast.AST) -> bool:
    return (isinstance(node, ast.If) and not node.orelse and len(node.body) == 1
            and isinstance(node.body[0], (ast.Return, ast.Raise, ast.Continue, ast.Break)))


def remove_statement(ctx: Context) -> Iterator[Mutation]:
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
                         f"removed {what} `{short(first)}`")
        if m:
            yield m

