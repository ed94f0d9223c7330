"""Length and temperature conversions."""

METERS_PER_UNIT = {"mm": 0.001, "cm": 0.01, "m": 1.0, "km": 1000.0, "in": 0.0254, "ft": 0.3048, "mi": 1609.344}
TEMPERATURE_UNITS = ("C", "F", "K")


def meters_per(unit):
    if unit not in METERS_PER_UNIT:
        raise ValueError(f"unknown length unit {unit!r}; known: {sorted(METERS_PER_UNIT)}")
    return METERS_PER_UNIT[unit]


def convert_length(value, from_unit, to_unit):
    return value * meters_per(from_unit) / meters_per(to_unit)


def celsius_to_fahrenheit(celsius):
    return celsius * 9 / 5 + 32


def fahrenheit_to_celsius(fahrenheit):
    return (fahrenheit - 32) * 5 / 9


def _to_celsius(value, unit):
    if unit == "C":
        return value
    if unit == "F":
        return fahrenheit_to_celsius(value)
    return value - 273.15


def _from_celsius(celsius, unit):
    if unit == "C":
        return celsius
    if unit == "F":
        return celsius_to_fahrenheit(celsius)
    return celsius + 273.15


def convert_temperature(value, from_unit, to_unit):
    for unit in (from_unit, to_unit):
        if unit not in TEMPERATURE_UNITS:
            raise ValueError(f"unknown temperature unit {unit!r}")
    celsius = _to_celsius(value, from_unit)
    result = _from_celsius(celsius, to_unit)
    return result


def convert(value, from_unit, to_unit):
    """Convert a length or a temperature, whichever the units name."""
    if from_unit in TEMPERATURE_UNITS:
        return convert_temperature(value, from_unit, to_unit)
    return convert_length(value, from_unit, to_unit)
