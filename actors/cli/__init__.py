"""The command line: `swerve ...` and `python -m actors ...` (`main`), `swerve tasks ...`
(`tasks_cli`) and `swerve status` (`status`). The top of the tree: it may import any of `actors`,
and `bench.registry` for `swerve bench`; nothing imports it but `actors/__main__.py`.
"""
