import os
import time

import pytest
import ray

from actors.cluster.roles import CollectorRole, TrainerGroup, WorkSource
from actors.cluster.roles import RoleFailure
from configs.schema import DeadlinesConfig
from envs.outcomes import InfraError, InfraSource

QUICK = DeadlinesConfig(collector_call_s=1.0, train_step_s=1.0, checkpoint_s=1.0)


@ray.remote(num_cpus=0)
class Source:
    """A work source / shard stand-in: answers, hangs, or dies on request."""

    def __init__(self, name: str = ""):
        self.name = name

    def accounting(self):
        return {"in_flight": 0}

    def next_batch(self, temperature):
        time.sleep(30)  # never answers within the deadline

    def stop(self):
        os._exit(1)

    def acquire(self, worker):
        time.sleep(30)

    def exchange(self, trajectory, worker):
        return f"{worker}:{trajectory}"

    def train_step(self, samples, temperature, tokens, rows):
        if self.name == "dies":
            os._exit(1)
        return {"samples": samples}


def test_the_collector_handle_names_its_role_when_it_hangs_or_dies(ray_session):
    collector = CollectorRole(started(Source.remote()), QUICK)
    assert collector.accounting() == {"in_flight": 0}
    begun_s = time.monotonic()
    with pytest.raises(RoleFailure) as hung:
        collector.next_batch(1.0)
    assert hung.value.role == "collector" and "did not answer within 1 s" in hung.value.cause
    assert time.monotonic() - begun_s < 10  # its deadline, not the call's 30 s
    with pytest.raises(RoleFailure) as dead:  # a fresh one: the first is still busy hanging
        CollectorRole(started(Source.remote()), QUICK).stop()
    assert dead.value.role == "collector" and "died" in dead.value.cause


def test_the_trainer_group_names_the_shard_that_failed(ray_session):
    group = TrainerGroup([started(Source.remote("ok")), started(Source.remote("dies"))], QUICK)
    group.layout = [(0, 1), (0, 1)]  # two tensor-parallel peers: both get every sample
    with pytest.raises(RoleFailure) as failed:
        group.train([1, 2], 1.0, 2, 2)
    assert failed.value.role == "trainer-1"
    healthy = TrainerGroup([started(Source.remote()), started(Source.remote())], QUICK)
    healthy.layout = [(0, 2), (1, 2)]  # data-parallel ranks split the samples
    assert healthy.train([1, 2, 3], 1.0, 3, 3) == [{"samples": [1, 3]}, {"samples": [2]}]


def started(actor):
    """The actor, once it answers: its start-up (seconds on a loaded machine) is not a call's deadline."""
    ray.get(actor.accounting.remote(), timeout=120)
    return actor


def test_an_episodes_work_source_fails_as_infra_error_at_its_deadline(ray_session):
    source = WorkSource(started(Source.remote()), timeout_s=1.0)
    assert source.exchange("t", "episode-0") == "episode-0:t"
    with pytest.raises(InfraError) as failed:
        source.acquire("episode-0")
    assert failed.value.source == InfraSource.ENV and "acquire" in str(failed.value)
