"""Ray-side plumbing on a real local Ray: sandbox leases survive actor deaths, engines' deaths are infra errors."""
import time

import pytest

from actors.engines.engine_router import EngineRouter
from actors.episodes.faults import FaultPlan
from actors.fleet.remote import RemoteEngine, SandboxLease, engine_call
from configs.schema import EngineConfig, FaultsConfig, SandboxConfig
from envs.outcomes import InfraError, InfraSource
from envs.tasks.loaders import load_tasks
from policies.sample_types import SampleRequest

pytestmark = pytest.mark.slow  # Ray actors


def test_killed_sandbox_is_an_infra_error_and_is_replaced(ray_session):
    task = load_tasks("builtin", "train")[0]
    lease = SandboxLease(0, SandboxConfig(), "swerve-tests-lease")
    lease.start(task)
    plan = FaultPlan.for_episode(FaultsConfig(sandbox_kill_rate=1.0), seed=0)
    with pytest.raises(InfraError) as err:
        plan.wrap_sandbox(lease).exec("ls")
    assert err.value.source == InfraSource.SANDBOX and plan.injected == {"sandbox_kill": 1}
    lease.start(task)  # a fresh actor
    assert lease.generation == 2
    result = lease.exec("ls")
    assert result.exit_code == 0 and result.output.strip()
    lease.close()


def test_a_sandbox_actor_slow_to_come_up_waits_on_its_own_deadline(ray_session, monkeypatch):
    """A burst of episodes queues their sandbox actors' processes behind each other (Ray starts a
    node's workers a few at a time): that wait has deadlines.sandbox_up_s, not the first call's
    deadline, so it is not mistaken for a hung sandbox. A process that never comes up within it is
    an infra error, and its actor is ended."""
    import ray

    from actors.episodes.sandbox_actor import SandboxActor
    from actors.fleet import remote

    class SlowToComeUp(SandboxActor):
        def __init__(self, *args):
            time.sleep(3.0)  # a process that waited its turn to start
            super().__init__(*args)

    monkeypatch.setattr(remote, "RemoteSandbox", ray.remote(SlowToComeUp))
    task = load_tasks("builtin", "train")[0]
    cfg = SandboxConfig(command_timeout_s=1.0)  # start's deadline: 1.5 s, half the wait to come up
    lease = SandboxLease(0, cfg, "swerve-tests-lease-up", label="up", margin_s=0.5, up_s=60.0)
    lease.start(task)
    assert lease.generation == 1 and lease.exec("ls").exit_code == 0
    lease.close()

    late = SandboxLease(1, cfg, "swerve-tests-lease-up", label="late", margin_s=0.5, up_s=1.0)
    with pytest.raises(InfraError) as err:
        late.start(task)
    assert err.value.source == InfraSource.TIMEOUT and late._handle is None
    with pytest.raises(ValueError):  # ended, not left to come up with nobody using it
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ray.get_actor("sandbox-late", namespace="swerve-tests-lease-up")
            time.sleep(0.2)


def test_a_sandbox_that_hangs_in_close_is_killed_and_the_episode_loop_goes_on(ray_session, monkeypatch, caplog):
    """Closing waits as long as a command may take (sandbox.command_timeout_s + the margin); a close
    that outlives it does not raise out of the episode loop (its outcome is decided): the actor is killed."""
    import logging

    import ray

    from actors.episodes.sandbox_actor import SandboxActor
    from actors.fleet import remote

    class HangsInClose(SandboxActor):
        def close(self):
            time.sleep(60.0)

    monkeypatch.setattr(remote, "RemoteSandbox", ray.remote(HangsInClose))
    lease = SandboxLease(0, SandboxConfig(command_timeout_s=1.0), "swerve-tests-lease-close", label="hangs",
                         margin_s=0.5)
    lease.start(load_tasks("builtin", "train")[0])
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger=remote.__name__):
        lease.close()
    assert 1.5 <= time.monotonic() - started < 30
    assert "sandbox-hangs did not close within 2 s" in caplog.text
    with pytest.raises(ValueError):  # killed, not left hanging with nobody using it
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ray.get_actor("sandbox-hangs", namespace="swerve-tests-lease-close")
            time.sleep(0.2)


def test_dead_engine_is_skipped_by_the_router(ray_session, model_path):
    import ray

    engines = [RemoteEngine.options(num_cpus=0).remote(i, EngineConfig(), model_path) for i in range(2)]
    router = EngineRouter(engines, engine_call)
    request = SampleRequest([1, 5, 9], 4)
    assert len(router.generate(request, "a").token_ids) == 4
    first = router._sticky["a"]
    ray.kill(engines[first])
    with pytest.raises(ray.exceptions.RayActorError):  # ray.kill is asynchronous: wait for the death
        while True:
            ray.get(engines[first].stats.remote())
    with pytest.raises(InfraError) as err:
        router.generate(request, "a")
    assert err.value.source == InfraSource.ENGINE and router.dead == {first}
    out = router.generate(request, "b")
    assert router._sticky["b"] == 1 - first and len(out.token_ids) == 4
    ray.kill(engines[1 - first])


def test_injected_llm_errors_are_engine_infra_errors(model_path):
    from actors.engines.engine_actor import EngineActor
    from actors.engines.engine_router import local_call

    plan = FaultPlan.for_episode(FaultsConfig(llm_error_rate=1.0), seed=0)
    engine = EngineActor(0, EngineConfig(), model_path)
    try:
        router = plan.wrap_router(EngineRouter([engine], local_call))
        with pytest.raises(InfraError, match="injected"):
            router.generate(SampleRequest([1, 2], 2), "k")
    finally:
        engine.close()  # a server left running holds ~400 MB and its share of the cores for the rest of the suite
    assert plan.injected == {"llm_error": 1}
    assert FaultPlan.for_episode(FaultsConfig(), seed=0) is None  # no rate set: no wrapper at all


def _perturbed(model_path):
    import torch

    from policies.engines.process import weights_file_bytes
    from policies.model import load_model

    torch.manual_seed(0)
    return weights_file_bytes({k: v + 0.05 * torch.randn_like(v) for k, v in load_model(model_path).state_dict().items()})


def test_dead_engine_is_replaced_and_serves_the_current_weights(ray_session, model_path):
    import time

    import ray

    from policies.engines.client import EngineClient
    from actors.fleet.launch import EngineSet
    from actors.fleet.remote import NamedEngines

    ns = "swerve-tests-replace"
    engines = EngineSet(EngineConfig(num_engines=2, max_context_tokens=512), model_path, ns).start()
    router = EngineRouter(engines.handles, engine_call, lookup=NamedEngines(ns))
    try:
        assert engines.sync(ray.put(_perturbed(model_path)), 1) == [1, 1]
        request = SampleRequest([1, 5, 9], 4)
        assert router.generate(request, "a").versions == [1] * 4
        first = router._sticky["a"]
        old, old_url = engines.handles[first], ray.get(engines.handles[first].stats.remote())["url"]
        ray.kill(old)
        with pytest.raises(InfraError) as err:
            router.generate(request, "a")
        assert err.value.source == InfraSource.ENGINE and router.dead == {first}
        stats = engines.stats()  # what a rollback's dump shows: the dead one named, the other live
        assert stats[first]["dead"] and not stats[1 - first].get("dead") and stats[1 - first]["ready"]

        assert engines.replace_dead() == [first] and engines.restarts == 1  # what the driver does
        new = engines.handles[first]
        assert ray.get(new.stats.remote())["ready"] and ray.get(new.version.remote()) == 1
        # The dead actor's server went with it.
        deadline = time.monotonic() + 15
        while EngineClient(old_url).health(timeout_s=1) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not EngineClient(old_url).health(timeout_s=1)
        # The router finds the replacement by its name and routes to it again.
        router._next_lookup[first] = 0.0
        router._pick()
        assert router.dead == set() and router.revived == 1
        out = router._call(first, "generate", request, timeout_s=60)
        assert out.versions == [1] * 4 and len(out.token_ids) == 4
    finally:
        for handle in engines.handles:
            ray.kill(handle)


def test_a_replacement_serves_nothing_before_its_weights(ray_session, model_path):
    import ray

    from actors.fleet.remote import create_engine

    engine = create_engine(EngineConfig(), 7, model_path, "swerve-tests-replace", wait_for_weights=True)
    try:
        pending = engine.generate.remote(SampleRequest([1, 5, 9], 4))
        ready, _ = ray.wait([pending], timeout=2.0)
        assert not ready and ray.get(engine.stats.remote())["ready"] is False
        assert ray.get(engine.update_weights.remote(ray.put(_perturbed(model_path)), 3)) == 3
        out = ray.get(pending)  # the perturbed model may end its reply early, on its end-of-text id
        assert out.token_ids and out.versions == [3] * len(out.token_ids)
        # The weights come as a safetensors file's bytes: the engine actor wrote them without torch
        # (importing it cost ~2 s at every fleet's first weight sync).
        assert ray.get(engine.__ray_call__.remote(lambda self: "torch" in __import__("sys").modules)) is False
    finally:
        ray.kill(engine)
