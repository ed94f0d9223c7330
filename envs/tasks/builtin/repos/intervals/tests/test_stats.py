import pytest

from intervals.stats import clamp, mean, median


def test_mean():
    assert mean([1, 2, 3, 6]) == 3


def test_median_odd():
    assert median([5, 1, 3]) == 3


def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5


def test_clamp():
    assert clamp(12, 0, 10) == 10
    assert clamp(-1, 0, 10) == 0


def test_median_empty_raises():
    with pytest.raises(ValueError):
        median([])
