"""Whole programs, one per stage: `driver.train` (the training loop: the whole story of a step) with
`restart` (checkpoints of a run and resuming) and `step_report` (a step's figures), `evaluate`
(`swerve eval`), `harness_traces` (SFT traces in a harness's own format), `pipeline` (the stages one
after another), `policy_setup` (the one way a run gets its tokenizer and model) and `stage_cache`
(which stages a re-run can reuse).

May import: any of `actors` but the command line, and `envs`, `policies`, `configs`
(tests/test_layers.py holds this).
"""
