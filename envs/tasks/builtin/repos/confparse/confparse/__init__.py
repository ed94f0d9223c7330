"""A small INI-style configuration parser with typed getters."""
