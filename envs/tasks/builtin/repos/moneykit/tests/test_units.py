import pytest

from moneykit.units import (
    celsius_to_fahrenheit,
    convert,
    convert_length,
    convert_temperature,
    fahrenheit_to_celsius,
)


def test_convert_length_metric():
    assert convert_length(2, "km", "m") == pytest.approx(2000)
    assert convert_length(150, "cm", "m") == pytest.approx(1.5)


def test_convert_length_imperial():
    assert convert_length(1, "ft", "m") == pytest.approx(0.3048)
    assert convert_length(12, "in", "ft") == pytest.approx(1.0)


def test_unknown_length_unit_raises():
    with pytest.raises(ValueError):
        convert_length(1, "furlong", "m")


def test_celsius_to_fahrenheit():
    assert celsius_to_fahrenheit(100) == pytest.approx(212)
    assert celsius_to_fahrenheit(-40) == pytest.approx(-40)


def test_fahrenheit_to_celsius():
    assert fahrenheit_to_celsius(212) == pytest.approx(100)
    assert fahrenheit_to_celsius(32) == pytest.approx(0)


def test_convert_temperature():
    assert convert_temperature(100, "C", "F") == pytest.approx(212)
    assert convert_temperature(0, "C", "K") == pytest.approx(273.15)


def test_convert_temperature_same_unit():
    assert convert_temperature(25, "C", "C") == 25


def test_convert_dispatches_lengths():
    assert convert(2, "km", "m") == pytest.approx(2000)


def test_convert_dispatches_temperatures():
    assert convert(100, "C", "F") == pytest.approx(212)
