import pytest

from datekit.durations import format_duration, parse_duration


def test_parse_minutes_and_seconds():
    assert parse_duration("90s") == 90
    assert parse_duration("2m5s") == 125


def test_parse_hours():
    assert parse_duration("2h") == 7200
    assert parse_duration("1h30m") == 5400


def test_parse_days():
    assert parse_duration("1d") == 86400


def test_parse_rejects_unknown_unit():
    with pytest.raises(ValueError):
        parse_duration("5x")


def test_parse_rejects_missing_unit():
    with pytest.raises(ValueError):
        parse_duration("15")


def test_format_duration():
    assert format_duration(5400) == "1h30m"
    assert format_duration(90061) == "1d1h1m1s"


def test_format_skips_zero_units():
    assert format_duration(3605) == "1h5s"


def test_format_zero():
    assert format_duration(0) == "0s"
