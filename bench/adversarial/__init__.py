"""Who tries to break it: the red team's attacks on grading, the tamper catalogue, and bad inputs
of every kind (replies, commands, rows, configs, model directories, ports). May import `actors`,
`envs`, `policies`, `configs`.
"""
