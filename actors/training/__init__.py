"""The roles that own samples and weights: the sample collector (the only owner of what is
trainable: admission, groups, advantages, batches, accounting) with its task picker, task table
and batch stats; the trainer shards (one rank each); and the eval queue, which plays the
collector's part in `swerve eval`. The loop that drives them is `actors/stages/driver.py`.

May import: `actors.report`, `actors.cluster`, `actors.episodes` (the records), and `envs`,
`policies`, `configs` (tests/test_layers.py holds this).
"""
