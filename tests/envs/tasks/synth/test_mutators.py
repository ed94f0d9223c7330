"""The bug mutators (envs/tasks/synth/mutators.py and its families): minimal edits that parse, every family,
deterministic given the seed, and exact on non-ASCII text, CRLF and annotations."""
import ast
import difflib
import textwrap

import pytest

from envs.tasks.synth.mutators import FAMILIES, find_mutations

SNIPPET = textwrap.dedent('''\
    import os  # a comment that must survive


    def f(x, y):
        """Docstring."""
        total = 0
        if x < y and y > 0:
            total += x * 2
        else:
            total = y - 1
        log(x, y)
        if not x:
            return None
        return total if x == 3 else -total
''')


def _changed_lines(old, new):
    diff = [l for l in difflib.unified_diff(old.splitlines(), new.splitlines(), n=0, lineterm="")
            if l[:1] in "+-" and not l.startswith(("+++", "---"))]
    return diff


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_makes_minimal_parsing_edits(family):
    muts = find_mutations(SNIPPET, "pkg/mod.py", seed=0, families=[family])
    assert muts, family
    for m in muts:
        assert m.family == family and m.file == "pkg/mod.py" and m.description
        assert m.new_text != SNIPPET
        ast.parse(m.new_text)
        # only the replaced span differs; everything else is byte-identical
        assert m.new_text == SNIPPET[: m.start] + m.replacement + SNIPPET[m.end :]
        assert "# a comment that must survive" in m.new_text
        changed = _changed_lines(SNIPPET, m.new_text)
        limit = 6 if family == "swap_if_else" else 3
        assert 0 < len(changed) <= limit, (family, changed)


def test_compare_and_binary_operators():
    compare = [m.new_text for m in find_mutations(SNIPPET, families=["change_compare_op"])]
    assert any("if x <= y and y > 0:" in t or "if x > y and y > 0:" in t
               or "y >= 0" in t or "y < 0" in t for t in compare)
    assert any("x != 3" in t for t in compare)
    binop = [m for m in find_mutations(SNIPPET, families=["change_binary_op"])]
    texts = [m.new_text for m in binop]
    assert any("total -= x * 2" in t for t in texts)
    assert any("total = y + 1" in t for t in texts)
    assert any("x + 2" in t or "x / 2" in t for t in texts)


def test_constant_negate_bool_swap_remove():
    consts = [m.new_text for m in find_mutations(SNIPPET, families=["change_constant"])]
    assert any("total = 1\n" in t for t in consts)  # 0 -> 1
    assert any("x == 4" in t or "x == 2" in t for t in consts)
    neg = [m.new_text for m in find_mutations(SNIPPET, families=["negate_condition"])]
    assert any("if not (x < y and y > 0):" in t for t in neg)
    assert any("    if x:\n        return None" in t for t in neg)
    assert any("total if not (x == 3) else" in t for t in neg)
    boolop = [m.new_text for m in find_mutations(SNIPPET, families=["change_bool_op"])]
    assert boolop == [SNIPPET.replace("x < y and y > 0", "x < y or y > 0")]
    swap = find_mutations(SNIPPET, families=["swap_if_else"])
    assert [m.new_text for m in swap] == [SNIPPET.replace(
        "        total += x * 2\n    else:\n        total = y - 1\n",
        "        total = y - 1\n    else:\n        total += x * 2\n")]
    args = [m.new_text for m in find_mutations(SNIPPET, families=["swap_call_args"])]
    assert args == [SNIPPET.replace("log(x, y)", "log(y, x)")]
    removed = [m.new_text for m in find_mutations(SNIPPET, families=["remove_statement"])]
    assert SNIPPET.replace("        total = 0\n", "").replace("    total = 0\n", "") in removed
    assert SNIPPET.replace("    log(x, y)\n", "") in removed
    assert SNIPPET.replace("    if not x:\n        return None\n", "") in removed
    # a sole statement in a block is replaced by `pass`, not deleted
    assert SNIPPET.replace("        total = y - 1\n", "        pass\n") in removed
    # module-level statements (the import) are never removed
    assert all("import os" in t for t in removed)


def test_mutations_are_deterministic_and_seeded():
    a = find_mutations(SNIPPET, "m.py", seed=1)
    b = find_mutations(SNIPPET, "m.py", seed=1)
    assert [m.new_text for m in a] == [m.new_text for m in b]
    assert set(m.family for m in a) == set(FAMILIES)


def test_non_ascii_crlf_and_annotations():
    src = 'def g(s: int | None = 1) -> "é":\r\n    t = "héllo"; u = 2\r\n    return len(t) + u\r\n'
    muts = find_mutations(src, families=["change_binary_op", "change_constant", "remove_statement"])
    texts = [m.new_text for m in muts]
    assert 'def g(s: int | None = 1) -> "é":\r\n    t = "héllo"; u = 2\r\n    return len(t) - u\r\n' in texts
    assert 'def g(s: int | None = 1) -> "é":\r\n    t = "héllo"; u = 3\r\n    return len(t) + u\r\n' in texts \
        or 'def g(s: int | None = 1) -> "é":\r\n    t = "héllo"; u = 1\r\n    return len(t) + u\r\n' in texts
    assert not any("int & None" in t for t in texts)  # annotations are left alone
    assert not any(m.family == "remove_statement" for m in muts)  # `a; b` lines are not cut
    assert find_mutations("def broken(:\n") == []
