"""A stand-in `sglang` package for machines without GPUs (see tests/fakes/README.md)."""
