import pytest

from intervals.interval import Interval, merge


def test_invalid_interval_raises():
    with pytest.raises(ValueError):
        Interval(3, 1)


def test_length():
    assert Interval(2, 7).length() == 5


def test_contains_interior():
    assert Interval(0, 10).contains(5)
    assert not Interval(0, 10).contains(11)


def test_contains_endpoints():
    assert Interval(0, 10).contains(0)
    assert Interval(0, 10).contains(10)


def test_overlaps_touching():
    assert Interval(0, 5).overlaps(Interval(5, 9))


def test_overlaps_disjoint():
    assert not Interval(0, 4).overlaps(Interval(5, 9))


def test_merge_overlapping():
    assert merge([Interval(4, 8), Interval(0, 5)]) == [Interval(0, 8)]


def test_merge_nested():
    assert merge([Interval(0, 10), Interval(2, 3)]) == [Interval(0, 10)]
