from textkit.count import char_frequencies, most_common, word_count


def test_word_count():
    assert word_count("  one two\tthree\n") == 3


def test_char_frequencies():
    assert char_frequencies("Aa b") == {"a": 2, "b": 1}


def test_char_frequencies_case_sensitive():
    assert char_frequencies("Aab", ignore_case=False) == {"A": 1, "a": 1, "b": 1}


def test_most_common_single():
    assert most_common("b a b c", 1) == ["b"]


def test_most_common_ties_alphabetical():
    assert most_common("b a c a b", 2) == ["a", "b"]
