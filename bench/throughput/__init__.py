"""How fast: benches that measure throughput as ratios against a baseline in the same run
(`swerve bench async_vs_sync | engine | gateway | gateway_harness | multiturn | turn_overhead | scale`;
bench/registry.py names them). May import `actors`, `envs`, `policies`, `configs`.
"""
