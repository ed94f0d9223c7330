"""The fault injector finds the actor that plays a role now, whatever the run replaced before the fault."""
import pytest

from bench.resilience.role_faults import actor_pid, current_name


@pytest.mark.slow
def test_a_role_is_found_under_its_newest_replacement_name(ray_session):
    import ray

    @ray.remote(num_cpus=0)
    class Role:
        def pid(self) -> int:
            import os

            return os.getpid()

    ns = "swerve-tests-role-names"
    # sandbox-0 already replaced twice (its first actor gone), episode 1 replaced once; a look-alike stays apart.
    actors = {name: Role.options(name=name, namespace=ns).remote()
              for name in ("sandbox-0-r1", "sandbox-0-r2", "sandbox-01", "episode-1", "episode-1-g1")}
    try:
        pids = {name: ray.get(handle.pid.remote()) for name, handle in actors.items()}  # each one up
        assert current_name(ns, "sandbox-0") == "sandbox-0-r2"
        assert current_name(ns, "episode-1") == "episode-1-g1"
        assert current_name(ns, "sandbox-01") == "sandbox-01"
        assert actor_pid(ns, "sandbox-0") == pids["sandbox-0-r2"]
        with pytest.raises(LookupError, match="no live actor plays sandbox-2"):
            current_name(ns, "sandbox-2")
    finally:
        for handle in actors.values():
            ray.kill(handle)
