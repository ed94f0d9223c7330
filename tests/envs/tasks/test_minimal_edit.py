import pytest

from envs.tasks.minimal_edit import minimal_edit


@pytest.mark.parametrize("line,target,old,new", [
    ("    if len(text) < width:", "    if len(text) <= width:", "< width", "<= width"),
    ("    if char.isupper() and index > 1:", "    if char.isupper() and index > 0:", "1:", "0:"),
    ("    return (32 - fahrenheit) * 5 / 9", "    return (fahrenheit - 32) * 5 / 9",
     "32 - fahrenheit", "fahrenheit - 32"),
])
def test_minimal_edit_is_short_and_first_occurrence(line, target, old, new):
    assert minimal_edit(line, target) == (old, new)
    assert line.replace(old, new, 1) == target
