"""Money amounts in integer cents and unit conversions."""
