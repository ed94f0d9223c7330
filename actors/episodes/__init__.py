"""One agent episode: `EpisodeActor` plays episodes one after another (a text env, or an unmodified
harness through `HarnessPlayer` and its session `Gateway`), `SandboxActor` owns a lease on its
node, `trajectory` holds the records that travel between roles (work items, trajectories,
samples, batches, STOP), and `faults` the injected faults (`faults.*`) wrapped around an episode's
engines and lease.

May import: `actors.report`, `actors.cluster`, and `envs`, `policies`, `configs`; no collector,
trainer or stage (tests/test_layers.py holds this).
"""
