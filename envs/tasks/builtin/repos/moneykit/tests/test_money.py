import pytest

from moneykit.money import Money


def test_parse():
    assert Money.parse("12.34") == Money(1234)
    assert Money.parse("7") == Money(700)


def test_parse_short_fraction_and_sign():
    assert Money.parse("3.5") == Money(350)
    assert Money.parse("-0.25") == Money(-25)


def test_parse_rejects_three_decimals():
    with pytest.raises(ValueError):
        Money.parse("1.234")


def test_str():
    assert str(Money(1234)) == "12.34 USD"
    assert str(Money(-5, "EUR")) == "-0.05 EUR"


def test_equality_needs_same_currency():
    assert Money(500, "USD") == Money(500, "USD")
    assert Money(500, "USD") != Money(500, "EUR")
    assert Money(500, "USD") != Money(501, "USD")


def test_add():
    assert Money(150) + Money(275) == Money(425)


def test_add_different_currencies_raises():
    with pytest.raises(ValueError):
        Money(100, "USD") + Money(100, "EUR")


def test_allocate_even():
    assert Money(100).allocate([1, 1]) == [Money(50), Money(50)]


def test_allocate_distributes_remainder():
    assert Money(100).allocate([1, 1, 1]) == [Money(34), Money(33), Money(33)]
    assert Money(5).allocate([1, 1, 1, 1]) == [Money(2), Money(1), Money(1), Money(1)]
