"""EngineRouter without Ray: what a late or failing engine call becomes."""
import pytest

from actors.engines.engine_router import EngineRouter
from envs.outcomes import InfraError, InfraSource
from policies.sample_types import SampleRequest


class IdleEngine:
    def stats(self):
        return {"running": 0, "queued": 0, "ready": True}


def late_generate(engine, method, *args, timeout_s):
    """As ray_call answers a generate that outlived its deadline."""
    if method == "generate":
        raise InfraError(InfraSource.TIMEOUT, f"generate on engine actor failed: GetTimeoutError ({timeout_s} s)")
    return getattr(engine, method)(*args)


def test_a_generate_past_its_deadline_is_the_engines_failure_never_the_tasks():
    """A hung or swamped engine must not quarantine the tasks whose episodes waited on it: the
    collector re-runs infra_error(engine) without counting it against the task."""
    router = EngineRouter([IdleEngine()], late_generate, generate_timeout_s=7.0)
    with pytest.raises(InfraError) as err:
        router.generate(SampleRequest([1, 2], 4), "episode-1")
    assert err.value.source is InfraSource.ENGINE
    assert "engine-0 did not answer generate within 7 s (deadlines.generate_s)" in str(err.value)
    assert router._outstanding[0] == 0 and router.dead == set()  # late, not dead: still routed to
