"""Closed numeric intervals and small statistics helpers."""
