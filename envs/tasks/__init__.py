"""Tasks: what an episode is asked to fix, wherever it comes from.

The format-independent record (`task.Task`), the loaders that read SWE-bench, SWE-smith and Harbor
rows into it (`loaders.load_tasks`), the generated sources (`micro`, `micro_stream`, the bug
injector in `synth/`, the built-in suite in `builtin/`), the endless streams RL draws from
(`stream`, `stream_sources.open_stream`), hidden cases as a task carries them (`hidden_cases`, run
by `hidden_runner.py`), pytest's summary as task builders read it, and what the scripted expert
plans from a gold patch (`expert_plan`).

May import: `envs.outcomes` and its own modules. Never a sandbox backend, the grader, or an env:
a task is data, and building one needs no lease (tests/test_layers.py holds this).
"""
