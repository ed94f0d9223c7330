"""The Ray layer: every role of a run and the programs that drive them (the only layer that knows
Ray). Bottom to top: `report/` (what a run writes and shows), `cluster/` (role handles and
placement), `engines/` and `episodes/` (the engine and episode roles), `training/` (the collector
and the trainer shards), `fleet/` (remote, launch, engine set, supervisor), `stages/` (the
training loop, eval, the pipeline) and `cli/`. docs/design.md ("Layers") draws the map.
"""
