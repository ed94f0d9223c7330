"""Where roles live and how they are called: `roles` (the handles through which one role calls
another, each owning its deadline and failure kind: `wait`, `RoleFailure`, `CollectorRole`,
`TrainerGroup`, `EpisodeLoops`), `placement_plan` (what a config creates, where each GPU role
lands; no Ray needed) and `placement` (that plan as Ray placement groups).

May import: `actors.report` only of `actors`, and `configs`, `envs.outcomes`: every role stands
on it, so it knows none of them (tests/test_layers.py holds this).
"""
