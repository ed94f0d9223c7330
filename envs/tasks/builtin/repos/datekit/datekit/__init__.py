"""Calendar arithmetic and duration strings."""
