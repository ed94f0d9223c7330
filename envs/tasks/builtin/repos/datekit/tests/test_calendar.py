import pytest

from datekit.calendar import add_months, day_of_year, days_in_month, is_leap_year, weekday


def test_leap_years():
    assert is_leap_year(2024)
    assert is_leap_year(2000)


def test_common_years():
    assert not is_leap_year(2023)
    assert not is_leap_year(1900)


def test_days_in_month():
    assert days_in_month(2023, 1) == 31
    assert days_in_month(2023, 4) == 30
    assert days_in_month(2023, 12) == 31


def test_days_in_february():
    assert days_in_month(2023, 2) == 28
    assert days_in_month(2024, 2) == 29


def test_invalid_month_raises():
    with pytest.raises(ValueError):
        days_in_month(2023, 13)
    with pytest.raises(ValueError):
        days_in_month(2023, 0)


def test_day_of_year_january():
    assert day_of_year(2023, 1, 1) == 1
    assert day_of_year(2023, 1, 31) == 31


def test_day_of_year_later_months():
    assert day_of_year(2023, 3, 1) == 60
    assert day_of_year(2024, 3, 1) == 61


def test_add_months_simple():
    assert add_months(2023, 1, 15, 1) == (2023, 2, 15)
    assert add_months(2023, 11, 15, 3) == (2024, 2, 15)


def test_add_months_clamps_day():
    assert add_months(2023, 1, 31, 1) == (2023, 2, 28)
    assert add_months(2024, 1, 31, 1) == (2024, 2, 29)


def test_add_months_backwards():
    assert add_months(2024, 1, 10, -1) == (2023, 12, 10)


def test_weekday_mid_year():
    assert weekday(2024, 5, 17) == 4  # Friday
    assert weekday(2023, 12, 25) == 0  # Monday


def test_weekday_january_and_march():
    assert weekday(2024, 1, 1) == 0  # Monday
    assert weekday(2024, 3, 1) == 4  # Friday
    assert weekday(2023, 3, 1) == 2  # Wednesday
