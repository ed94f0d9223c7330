"""Small text utilities: identifier cases, wrapping, counting."""
