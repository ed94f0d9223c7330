"""Sandboxes: one lease on a fresh copy of a task's workspace, and what happens when it dies.

The protocol every backend offers (`sandbox.Sandbox`, `ExecResult`), the backends (`local_sandbox`:
bubblewrap on this host; `docker_sandbox` with `docker_engine`; `e2b_sandbox`; what the container
backends share in `container_sandbox`), the warm pool (`sandbox_pool`), per-lease cgroups
(`cgroups`), the host's end of the in-jail exec server (`exec_channel`), a harness's one route out
(`gateway_route`), Harbor's separate verifier container (`verifier_container`), and `jail/`: the
standard-library code that runs inside the jail.

May import: `envs.outcomes` and the task record `envs.tasks.task` (a lease is made for a task);
nothing else of `envs` (tests/test_layers.py holds this).
"""
