"""How a run's roles exist in Ray: `placement_plan` (what a config creates, no Ray needed),
`placement` (its placement groups), `remote` (the one place plain classes become actors),
`launch` (start Ray and build every role) and `roles` (the handles through which one role calls
another, each owning its deadline and failure kind).

May import: every actor class it wraps, `configs`, `envs.outcomes`; never a stage or the command line.
"""
