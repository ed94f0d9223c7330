"""One agent episode as roles: `EpisodeActor` plays episodes one after another (a text env, or an
unmodified harness through `HarnessPlayer` and its `Gateway` session), `SandboxActor` owns a lease on
its node, and `trajectory` holds the records that travel between roles (work items, trajectories,
samples, batches).

May import: `envs`, `policies` and `configs`; nothing else of `actors` (tests/test_layers.py holds
this): the episode side knows no collector, trainer or stage.
"""
