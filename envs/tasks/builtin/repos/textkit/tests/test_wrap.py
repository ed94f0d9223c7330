from textkit.wrap import pad_center, truncate, wrap


def test_truncate_long_text():
    assert truncate("hello world", 8) == "hello..."


def test_truncate_exact_width_is_unchanged():
    assert truncate("hello", 5) == "hello"


def test_wrap_lines():
    assert wrap("the quick brown fox", 10) == ["the quick", "brown fox"]


def test_pad_center_even():
    assert pad_center("ab", 6, "*") == "**ab**"


def test_pad_center_odd_extra_goes_right():
    assert pad_center("ab", 5, "*") == "*ab**"
