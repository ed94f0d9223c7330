"""The engine role: `EngineActor` owns one inference server process and is the only thing that
talks to it; `EngineRouter` picks an engine per trajectory (least outstanding work, then sticky).
The run's handle to all engines is `actors/fleet/engine_set.py`.

May import: `actors.report`, `actors.cluster`, and `policies`, `configs` (tests/test_layers.py
holds this).
"""
