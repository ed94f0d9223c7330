"""The one place where plain actor classes become Ray actors and Ray calls are made.

Inside an episode, Ray actors are used through `Proxy` objects that look like the plain
class, so EpisodeActor and the env never import Ray; a dead actor becomes an InfraError
with the right source.
"""
from __future__ import annotations

from typing import Optional

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from actors.engine_actor import EngineActor
from actors.episode_actor import EpisodeActor
from actors.sample_collector import SampleCollector
from actors.sandbox_actor import SandboxActor
from actors.trainer_shard import TrainerShard
from envs.outcomes import InfraError, InfraSource

# Engines take concurrent generate calls; a worker thread batches them.
RemoteEngine = ray.remote(max_concurrency=256)(EngineActor)
RemoteEpisode = ray.remote(EpisodeActor)
RemoteCollector = ray.remote(SampleCollector)
RemoteSandbox = ray.remote(SandboxActor)
RemoteTrainer = ray.remote(TrainerShard)


def ray_call(handle, method: str, *args, source: Optional[InfraSource] = None, timeout_s: float | None = None):
    """Call a method of an actor and wait; an actor death is an InfraError of `source`."""
    try:
        return ray.get(getattr(handle, method).remote(*args), timeout=timeout_s)
    except (RayActorError, GetTimeoutError) as err:
        if source is None:
            raise
        kind = InfraSource.TIMEOUT if isinstance(err, GetTimeoutError) else source
        raise InfraError(kind, f"{method} on {source.value} actor failed: {type(err).__name__}: {err}") from err


def engine_call(handle, method: str, *args):
    return ray_call(handle, method, *args, source=InfraSource.ENGINE)


class Proxy:
    """Makes a Ray actor handle usable as the plain object it wraps."""

    def __init__(self, handle, source: Optional[InfraSource] = None):
        self._handle = handle
        self._source = source

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)

        def method(*args):
            return ray_call(self._handle, name, *args, source=self._source)

        return method

    def __reduce__(self):
        return (Proxy, (self._handle, self._source))
