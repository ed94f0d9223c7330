"""Does it keep working: the reliability bench (faults at every rate, bad inputs, restarts), the
restart torture, role faults, a lost node, placement on a multi-node cluster and the dashboard in
a real browser (bench/registry.py names them). May import `actors`, `envs`, `policies`, `configs`,
and `bench.adversarial` (the reliability bench counts its bad inputs).
"""
