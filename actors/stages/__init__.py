"""The stages of `swerve pipeline`: `pipeline` (one stage after another), `evaluate` (`swerve eval`,
fed by `eval_queue`), `harness_traces` (SFT traces in a harness's own format), `policy_setup` (the
one way a run gets its tokenizer and model) and `stage_cache` (which stages a re-run can reuse).

May import: `actors.training`, `actors.episodes`, `actors.cluster`, `actors.report`, `envs`, `policies`,
`configs`; never the command line.
"""
