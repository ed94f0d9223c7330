"""The training loop's roles: `driver.train` (the whole story of a step), the sample collector (the
only owner of what is trainable), task picking, the trainer shards, checkpoints of a run
(`restart`), and what keeps it alive (`supervisor`, `watchdog`, `faults` for injected ones).

May import: `actors.episodes`, `actors.engines`, `actors.cluster`, `actors.report`, `envs`,
`policies`, `configs`; never a stage or the command line.
"""
