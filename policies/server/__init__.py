"""swerve's CPU inference server: a subset of SGLang's native HTTP API (see protocol.py)."""
