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

Each family is one function over the sites of a file (envs/tasks/synth/sites.py, the shared
walker): expression_mutators.py and statement_mutators.py. Everything is deterministic given
(source, file name, seed).
"""
from __future__ import annotations

import ast
import random
from typing import Callable, Iterator

from envs.tasks.synth.expression_mutators import (change_binary_op, change_bool_op, change_compare_op, change_constant,
                                                  swap_call_args)
from envs.tasks.synth.sites import Context, Mutation, annotation_nodes, skipped_region_ids
from envs.tasks.synth.statement_mutators import negate_condition, remove_statement, swap_if_else

__all__ = ["FAMILIES", "find_mutations"]

_FAMILY_FUNCS: dict[str, Callable[[Context], Iterator[Mutation]]] = {
    "change_compare_op": change_compare_op,
    "change_binary_op": change_binary_op,
    "change_constant": change_constant,
    "negate_condition": negate_condition,
    "swap_if_else": swap_if_else,
    "remove_statement": remove_statement,
    "swap_call_args": swap_call_args,
    "change_bool_op": change_bool_op,
}
FAMILIES: tuple[str, ...] = tuple(_FAMILY_FUNCS)


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
    skip = skipped_region_ids(tree) | annotation_nodes(tree)
    out: list[Mutation] = []
    for family in families or FAMILIES:
        rng = random.Random(f"{seed}:{file}:{family}")
        ctx = Context(source, tree, file, rng)
        ctx.sites = [s for s in ctx.sites if id(s.node) not in skip]
        out.extend(_FAMILY_FUNCS[family](ctx))
    return out

