"""Ray-side plumbing on a real local Ray: sandbox leases survive actor deaths, engines' deaths are infra errors."""
import pytest

from actors.engine_router import EngineRouter
from actors.remote import RemoteEngine, SandboxLease, engine_call
from configs.schema import EngineConfig, FaultsConfig, SandboxConfig
from envs.outcomes import InfraError, InfraSource
from envs.tasks import load_tasks
from policies.sampler import SampleRequest


def test_killed_sandbox_is_an_infra_error_and_is_replaced(ray_session):
    task = load_tasks("builtin", "train")[0]
    lease = SandboxLease(0, SandboxConfig(), FaultsConfig(sandbox_kill_rate=1.0), "swerve-tests-lease", seed=0)
    lease.start(task)
    with pytest.raises(InfraError) as err:
        lease.exec("ls")
    assert err.value.source == InfraSource.SANDBOX and lease.kills_injected == 1
    lease.faults = FaultsConfig()
    lease.start(task)  # a fresh actor
    assert lease.generation == 2
    result = lease.exec("ls")
    assert result.exit_code == 0 and result.output.strip()
    lease.close()


def test_dead_engine_is_skipped_by_the_router(ray_session, model_path):
    import ray

    engines = [RemoteEngine.options(num_cpus=0).remote(i, EngineConfig(), model_path) for i in range(2)]
    router = EngineRouter(engines, engine_call)
    request = SampleRequest([1, 5, 9], 4)
    assert len(router.generate(request, "a").token_ids) == 4
    first = router._sticky["a"]
    ray.kill(engines[first])
    with pytest.raises(InfraError) as err:
        router.generate(request, "a")
    assert err.value.source == InfraSource.ENGINE and router.dead == {first}
    out = router.generate(request, "b")
    assert router._sticky["b"] == 1 - first and len(out.token_ids) == 4
    ray.kill(engines[1 - first])


def test_injected_llm_errors_are_engine_infra_errors(model_path):
    from actors.engine_actor import EngineActor
    from actors.engine_router import local_call

    router = EngineRouter([EngineActor(0, EngineConfig(), model_path)], local_call, llm_error_rate=1.0)
    with pytest.raises(InfraError, match="injected"):
        router.generate(SampleRequest([1, 2], 2), "k")
