"""Calendar arithmetic on (year, month, day) triples, proleptic Gregorian calendar."""

DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
# Sakamoto's month offsets for the day-of-week formula.
_MONTH_OFFSETS = [0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4]


def is_leap_year(year):
    """Years divisible by 4 are leap years, except centuries not divisible by 400."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    if not 1 <= month <= 12:
        raise ValueError(f"month must be in 1..12, got {month}")
    if month == 2 and is_leap_year(year):
        return 29
    return DAYS_IN_MONTH[month - 1]


def day_of_year(year, month, day):
    """1 for January 1st, 365 (366 in leap years) for December 31st."""
    total = day
    for earlier in range(1, month):
        total += days_in_month(year, earlier)
    return total


def add_months(year, month, day, months):
    """Shift a date by whole months; the day is clamped to the target month's length."""
    index = year * 12 + (month - 1) + months
    new_year, new_month = divmod(index, 12)
    new_month += 1
    last_day = days_in_month(new_year, new_month)
    return new_year, new_month, min(day, last_day)


def weekday(year, month, day):
    """Day of the week: 0 = Monday ... 6 = Sunday."""
    if month < 3:
        year -= 1
    sunday_based = (year + year // 4 - year // 100 + year // 400 + _MONTH_OFFSETS[month - 1] + day) % 7
    return (sunday_based + 6) % 7
