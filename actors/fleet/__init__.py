"""A run's fleet: `remote` (the one place plain role classes become Ray actors), `launch` (start Ray
and build every role of a run), `engine_set` (the run's engines as one set: start, replace the
dead, push weights), and what keeps the fleet alive without a human (`supervisor`, `watchdog`).

May import: `actors.report`, `actors.cluster`, `actors.engines`, `actors.episodes`,
`actors.training` (the classes it makes actors of); never a stage or the command line.
"""
