"""SWE-smith-style task synthesis: procedural bug injection into local Python repositories."""
