"""envs/grading/constant_fold.py: literal arithmetic is folded where it spells a name, and never
costs the host more than a small bound however large the literal arithmetic an agent writes."""
import ast
import bz2
import resource
import textwrap
import tracemalloc
import zlib

import pytest

from envs.grading.constant_fold import FILE_BUDGET, NOT_FOLDED, Folder
from envs.grading.hack_detect import added_code_reason

# One added line each: before the bounds, each cost the host from 1 GB (widths, to_bytes) to
# 4 GB (expandtabs) of memory, or minutes of CPU (the repr of a list nested by repetition).
HUGE = {
    "printf-star-width": '"%*d" % (10**9, 1)',
    "printf-digit-width": '"%0999999d" % 1',
    "to-bytes-length": '(1).to_bytes(10**9, "big")',
    "expandtabs": '("\\t" * 4096).expandtabs(4096)',
    "format-keyword-width": '"{:{w}}".format(1, w="999999999")',
    "format-argument-width": '"{:{}}".format(1, 4096) * 4096',
    "format-builtin-width": 'format(1, "999999999")',
    "fstring-width": 'f"{1:{10**9}}"',
    "repr-of-nested-repetition": 'str([[[0] * 4096] * 4096] * 4096)',
    "join-of-repetition": '"".join(["a" * 4096] * 4096)',
    "separator-join": '("a" * 4096).join(["b"] * 4096)',
    "replace-expanding": '("a" * 4096).replace("a", "b" * 4096)',
    "translate-expanding": '("a" * 4096).translate({97: "b" * 4096})',
    "pow-tower": '10**10**8',
    "pow-chain": '2**64**64',
    "pow-then-mul": '(2**8000) * (2**8000) * (2**8000)',
    "shift": '1 << 10**9',
    "shift-chain": '1 << 8000 << 8000 << 8000',
    "int-of-digits": 'int("9" * 4096)',
    "bytes-size": 'bytes(10**9)',
    "ljust-width": '"a".ljust(10**9)',
    "range-list": 'list(range(-10**6, 10**6))',
    "zlib-bomb": f'codecs.decode({zlib.compress(bytes(4 << 20))!r}, "zlib")',
    "bz2-bomb": f'codecs.decode({bz2.compress(bytes(1 << 26))!r}, "bz2")',
    "pure-function-mapped": 'list(map(bytes, [10**9]))',
    "pure-function-as-key": 'sorted([10**9], key=bytes)',
    "format-mapped": 'list(map(format, [1], ["999999999"]))',
    "sum-of-lists": 'sum([[0] * 4096] * 4096, [])',
}


def fold(expression: str):
    return Folder({}).value(ast.parse(expression, mode="eval").body)


@pytest.mark.parametrize("expression", HUGE.values(), ids=HUGE.keys())
def test_huge_literal_arithmetic_is_refused_within_a_small_bound(expression):
    tracemalloc.start()
    try:
        value = fold(expression)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert value is NOT_FOLDED
    assert peak_bytes < 4 << 20, peak_bytes


@pytest.mark.parametrize("expression,expected", [
    ('"mod" + "ules"', "modules"),
    ('"%s%s" % ("ev", "al")', "eval"),
    ('"%5s" % "x"', "    x"),
    ('(0x65786563).to_bytes(4, "big").decode()', "exec"),
    ('"{}{}".format(*map(chr, [101, 118]))', "ev"),
    ("f'__{\"glo\"}bals__'", "__globals__"),
    ('"{:>6}".format("exec")', "  exec"),
    ('"x".join(["a", "b"])', "axb"),
    ('"xxglobalsxx".replace("x", "_")', "__globals__"),
    ('2 ** 64', 18446744073709551616),
    ('1 << 100', 1 << 100),
    ('(-1) ** (10**100)', 1),
    ('"ab" * 3', "ababab"),
    ('3 * [0]', [0, 0, 0]),
    ('int("101", 2)', 5),
    ('bytes(4)', b"\0\0\0\0"),
    ('codecs.decode("rkrp", "rot13")', "exec"),
    ('"".join([chr(c) for c in (109, 111, 100)])', "mod"),
])
def test_small_literal_arithmetic_still_folds(expression, expected):
    assert fold(expression) == expected


def test_a_file_of_costly_lines_costs_a_bounded_budget_and_is_flagged():
    # 2,000 uncalled functions, each folding as long as one expression may: before the file's
    # budget this cost the host minutes of CPU; now it stops at FILE_BUDGET steps and says so.
    line = 'x = [c + d for c in "a" * 4000 for d in "b" * 4000]'
    source = "".join(f"def f{i}():\n    {line}\n" for i in range(2000))
    before = resource.getrusage(resource.RUSAGE_SELF)
    reason = added_code_reason("", source)
    after = resource.getrusage(resource.RUSAGE_SELF)
    assert "too costly to constant-fold" in reason
    assert (after.ru_utime - before.ru_utime) < 10.0


def test_the_file_budget_is_counted_across_expressions():
    folder = Folder({})
    expression = ast.parse('[c for c in "a" * 4000 for d in "b" * 4000]', mode="eval").body
    spent = []
    for _ in range(FILE_BUDGET // 4000 + 2):
        node = ast.parse(ast.unparse(expression), mode="eval").body
        assert folder.value(node) is NOT_FOLDED
        spent.append(folder.spent)
    assert folder.exhausted and folder.spent <= FILE_BUDGET + 5001
    assert folder.value(ast.parse('"a" + "b"', mode="eval").body) is NOT_FOLDED


def test_an_honest_module_stays_within_the_budget():
    # A realistic file of many small constants, every line added (a new file).
    source = "".join(textwrap.dedent(f"""\
        NAME_{i} = "name-%d" % {i}
        WIDTH_{i} = "{{:>8}}".format("v{i}")
        """) for i in range(400))
    assert added_code_reason(None, source) == ""
