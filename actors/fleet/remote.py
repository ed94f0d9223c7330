"""The one place where plain actor classes become Ray actors and Ray calls are made.

Inside an episode, Ray actors are used through handles that look like the plain class
(SandboxLease here, actors/cluster/roles.py WorkSource, the engine router), so EpisodeActor and the env
never import Ray; a dead actor becomes an InfraError with the right source. Nothing here imports torch at import time (see remote_trainer).
"""
from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from actors.engines.engine_actor import EngineActor
from actors.episodes.episode_actor import EpisodeActor
from actors.training.eval_queue import EvalQueue
from actors.training.sample_collector import SampleCollector
from actors.episodes.sandbox_actor import SandboxActor
from actors.fleet.lean_worker import lean_runtime_env
from policies.engines.process import SERVER_COMMANDS
from policies.engines.sim_engine import SimEngine
from configs.schema import DeadlinesConfig, EngineConfig, SandboxConfig
from configs.schema.engine import check_backend_registry
from envs.outcomes import ActorLost, InfraError, InfraSource
from envs.sandboxes.sandbox import ExecResult

log = logging.getLogger(__name__)

# Engines take concurrent generate calls, each waiting on the engine's server (or, sim, on its
# decode loop), which batches them. By engine.backend:
RemoteEngine = ray.remote(max_concurrency=256)(EngineActor)
RemoteSimEngine = ray.remote(max_concurrency=256)(SimEngine)
# A backend with a server (policies/engines/process.py SERVER_COMMANDS) runs it from an EngineActor.
REMOTE_ENGINES = {**dict.fromkeys(SERVER_COMMANDS, RemoteEngine), "sim": RemoteSimEngine}
check_backend_registry(REMOTE_ENGINES, "actors/fleet/remote.py REMOTE_ENGINES")
# One episode and one sandbox actor per concurrent episode: their workers start lean (lean_worker.py).
RemoteEpisode = ray.remote(runtime_env=lean_runtime_env())(EpisodeActor)
RemoteCollector = ray.remote(SampleCollector)
RemoteEvalQueue = ray.remote(EvalQueue)
RemoteSandbox = ray.remote(runtime_env=lean_runtime_env())(SandboxActor)


@functools.cache
def remote_trainer():
    """The trainer shard as a Ray actor class. Imported here on first use: this module is also
    imported by every episode actor (it unpickles the proxies below), which must stay free of
    torch, the one heavy import (seconds of CPU and ~300 MB per process)."""
    from actors.training.trainer_shard import TrainerShard

    return ray.remote(TrainerShard)


def ray_call(handle, method: str, *args, source: InfraSource, timeout_s: float):
    """Call a method of an actor and wait at most timeout_s (a deadline from configs DeadlinesConfig);
    a death is ActorLost of `source`, a missed deadline ActorLost of TIMEOUT."""
    try:
        return ray.get(getattr(handle, method).remote(*args), timeout=timeout_s)
    except (RayActorError, GetTimeoutError) as err:
        kind = InfraSource.TIMEOUT if isinstance(err, GetTimeoutError) else source
        raise ActorLost(kind, f"{method} on {source.value} actor failed: {type(err).__name__}: {err}") from err


def engine_call(handle, method: str, *args, timeout_s: float):
    return ray_call(handle, method, *args, source=InfraSource.ENGINE, timeout_s=timeout_s)


def engine_name(index: int) -> str:
    return f"engine-{index}"


def placement(resource: str) -> dict:
    """Ray options that put an actor on a node declaring `resource` (a sliver of it per actor)."""
    return {"resources": {resource: 0.001}} if resource else {}


def create_engine(cfg: EngineConfig, index: int, model_path: str, namespace: str, wait_for_weights: bool = False,
                  options: Optional[dict] = None, deadlines: Optional[DeadlinesConfig] = None):
    """A named engine actor (`engine-<index>` in the run's namespace); a replacement reuses the name.
    `options`: where it runs (actors/cluster/placement.py: its GPUs, or its role resource).

    The actor ends itself when its server dies, so a dead server looks like a dead actor to
    everyone (routers fail its requests as infra_error(engine), the driver replaces it).
    """
    return REMOTE_ENGINES[cfg.backend].options(
        name=engine_name(index), namespace=namespace, num_cpus=0, max_restarts=0,
        max_concurrency=cfg.max_concurrency, **(options or {}),
    ).remote(index, cfg, model_path, wait_for_weights, True, deadlines)


class NamedEngines:
    """Router-side lookup of the engine now registered as `engine-<i>` (None when there is none)."""

    def __init__(self, namespace: str):
        self.namespace = namespace

    def __call__(self, index: int):
        try:
            return ray.get_actor(engine_name(index), namespace=self.namespace)
        except ValueError:
            return None


class SandboxLease:
    """An episode's sandbox: calls go to a SandboxActor that this episode's process owns.

    The actor is created on first use, so it fate-shares with the episode actor (a lease
    dies with its owner). When it dies, the call fails as infra_error(sandbox) and the next
    `start` gets a fresh actor, so one crash costs one episode, not the rest of the run.
    """

    def __init__(self, index: int, cfg: SandboxConfig, namespace: str, resource: str = "", label: str = "",
                 margin_s: float = DeadlinesConfig.sandbox_margin_s, up_s: float = DeadlinesConfig.sandbox_up_s):
        """margin_s (deadlines.sandbox_margin_s): room above a call's own time limit before the
        sandbox actor counts as hung; it is then killed and the call fails as infra_error.
        up_s (deadlines.sandbox_up_s): how long a new actor may take to come up, apart from its calls."""
        self.index, self.cfg, self.namespace = index, cfg, namespace
        self.margin_s, self.up_s = margin_s, up_s
        self.label = label or str(index)  # names its actors: a replaced episode's lease needs fresh names
        self.resource = resource
        self._handle = None
        self.generation = 0

    def _actor(self):
        if self._handle is None:
            suffix = f"-r{self.generation}" if self.generation else ""
            self._handle = RemoteSandbox.options(
                name=f"sandbox-{self.label}{suffix}", namespace=self.namespace, num_cpus=0,
                **placement(self.resource),
            ).remote(self.index, self.cfg)
            self.generation += 1
            # The wait for the process is not the first call's: it queues behind the node's other starts.
            ray_call(self._handle, "__ray_ready__", source=InfraSource.SANDBOX, timeout_s=self.up_s)
        return self._handle

    def _call(self, method: str, *args, timeout_s: float):
        try:
            return ray_call(self._actor(), method, *args, source=InfraSource.SANDBOX, timeout_s=timeout_s)
        except InfraError:
            if self._handle is not None:
                ray.kill(self._handle)  # a hung actor is ended too; the next start replaces it
                self._handle = None
            raise

    def kill(self) -> None:
        """End the sandbox actor as a crash would (fault injection, actors/episodes/faults.py): the call
        under way or the next one fails as infra_error(sandbox), the next start replaces it."""
        handle = self._actor()
        ray.kill(handle)
        # ray.kill is asynchronous: wait for the death, so the next call fails as after a real crash
        # instead of racing the kill and sometimes succeeding.
        deadline = time.monotonic() + self.margin_s
        while time.monotonic() < deadline:
            try:
                ray.get(handle.stats.remote(), timeout=max(0.0, deadline - time.monotonic()))
            except RayActorError:
                return
            except GetTimeoutError:
                break
            time.sleep(0.05)
        raise RuntimeError(f"sandbox-{self.label} outlived ray.kill for {self.margin_s:.0f} s")

    def start(self, task) -> None:
        self._call("start", task, timeout_s=self.margin_s + self.cfg.command_timeout_s)

    def exec(self, command: str, timeout_s: Optional[float] = None) -> ExecResult:
        limit_s = (timeout_s or self.cfg.command_timeout_s) + self.margin_s
        return self._call("exec", command, timeout_s, timeout_s=limit_s)

    def read_files(self, paths: Sequence[str]) -> Dict[str, str]:
        return self._call("read_files", list(paths), timeout_s=self.margin_s)

    def write_files(self, files: Mapping[str, str]) -> None:
        self._call("write_files", dict(files), timeout_s=self.margin_s)

    def reset(self) -> None:
        self._call("reset", timeout_s=self.margin_s)

    def gateway_dir(self) -> Optional[Path]:
        """The lease's gateway folder on the sandbox actor's host, which must be this one: the
        harness reaches its session through a Unix socket (keep sandboxes on their episode's node
        with ray.sandbox_resource)."""
        path = self._call("gateway_dir", timeout_s=self.margin_s)
        if path is not None and not Path(path).is_dir():
            raise InfraError(InfraSource.SANDBOX, f"sandbox-{self.label}'s gateway folder {path} is not on this node: "
                             "an agent-harness env needs its sandboxes on its episode actors' nodes "
                             "(set ray.sandbox_resource to a resource of those nodes)")
        return path

    def close(self) -> None:
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        # Closing ends what still runs and removes the workspace: as long as a command may take.
        limit_s = self.cfg.command_timeout_s + self.margin_s
        try:
            ray.get(handle.close.remote(), timeout=limit_s)
        except RayActorError:
            # A dead sandbox actor took its lease with it: nothing is left to close.
            log.info("sandbox-%d was already gone when its lease was closed", self.index)
        except GetTimeoutError:
            # The episode's outcome is already decided: a hung close must not end the episode
            # loop. The actor is ended as after a crash (the next lease ends a jail it left).
            ray.kill(handle)
            log.warning("sandbox-%s did not close within %.0f s (sandbox.command_timeout_s + "
                        "deadlines.sandbox_margin_s); its actor was killed", self.label, limit_s)
