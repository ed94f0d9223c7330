"""Inference engines as roles: `EngineActor` owns one server process, `EngineSet` is the run's
handle to all of them (start, replace the dead, push weights), `EngineRouter` picks one per
trajectory.

May import: `actors.cluster` (how roles are created, placed and called), `actors.training.supervisor`'s
failure kinds through the handles, `policies` (the engine wire) and `configs`.
"""
