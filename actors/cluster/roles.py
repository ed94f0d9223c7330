"""The handles through which one role calls another. Each owns its Ray calls, the deadline of each
(configs/schema/run.py DeadlinesConfig, the one home of every deadline) and the failure it raises:
a role that dies or misses a deadline is named in that failure, never guessed from Ray's text.

    CollectorRole  the driver's handle on the work source (SampleCollector, or eval's EvalQueue)
    TrainerGroup   the driver's handle on the trainer shards, as one group
    EpisodeLoops   the driver's handle on the episode actors' run() loops (which ended, and how)
    WorkSource     an episode actor's client of the work source (acquire, exchange)

The engines' handle is actors/fleet/engine_set.py (EngineSet), a sandbox's actors/fleet/remote.py
(SandboxLease); tests/test_role_calls.py holds actors/ to waiting on Ray only in these, each wait with a deadline.

The driver's side raises RoleFailure (actors/fleet/supervisor.py rolls the run back); the episode's side
raises InfraError (the episode is not scored, and the episode loop decides what to do).
"""
from __future__ import annotations

import time
from typing import Any, Optional, Sequence

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from configs.schema import DeadlinesConfig
from envs.outcomes import InfraError, InfraSource


class RoleFailure(Exception):
    """A stateful role (collector, trainer-<r>) died or hung: the run must roll back."""

    def __init__(self, role: str, cause: str, call: str = ""):
        """call: the method the caller waited on when it failed ("" when none: the watchdog's)."""
        super().__init__(f"{role}: {cause}")
        self.role, self.cause, self.call = role, cause, call


def wait(refs, roles: Sequence[str], timeout_s: float, call: str = "") -> list:
    """Every ref's value within one deadline; a death or a missed deadline is a RoleFailure naming
    the role of the ref that failed and the call waited on."""
    deadline = time.monotonic() + timeout_s
    results = []
    for ref, role in zip(refs, roles):
        try:
            results.append(ray.get(ref, timeout=max(0.0, deadline - time.monotonic())))
        except RayActorError as err:
            raise RoleFailure(role, f"died ({str(err).splitlines()[0][:200]})", call) from err
        except GetTimeoutError as err:
            raise RoleFailure(role, f"did not answer within {timeout_s:.0f} s (hung; deadlines.* in the config)",
                              call) from err
    return results


class CollectorRole:
    """The books: batches, accounting, the version, checkpoints of its state. One actor, named
    "collector" in every failure (EvalQueue plays the part in eval)."""
    role = "collector"

    def __init__(self, actor, deadlines: DeadlinesConfig):
        self.actor = actor
        self.deadlines = deadlines

    def _call(self, method: str, *args, timeout_s: Optional[float] = None):
        ref = getattr(self.actor, method).remote(*args)
        return wait([ref], [self.role], timeout_s or self.deadlines.collector_call_s, method)[0]

    def next_batch(self, temperature: float):
        return self._call("next_batch", temperature)

    def accounting(self) -> dict:
        return self._call("accounting")

    def set_version(self, version: int) -> None:
        self._call("set_version", version)

    def abandon(self, holder: str, source: str, reason: str) -> int:
        return self._call("abandon", holder, source, reason)

    def stop(self) -> None:
        self._call("stop")

    def snapshot(self) -> dict:
        return self._call("snapshot", timeout_s=self.deadlines.checkpoint_s)

    def live(self) -> dict:
        """The books as `swerve status` shows them (SampleCollector only)."""
        return self._call("live")

    def progress(self) -> dict:
        """Attempts done, running and re-run (EvalQueue only)."""
        return self._call("progress")

    def results(self) -> list:
        """Every finished attempt's trajectory (EvalQueue only)."""
        return self._call("results")

    def restore(self, state: dict) -> int:
        return self._call("restore", state, timeout_s=self.deadlines.checkpoint_s)


class TrainerGroup:
    """The trainer shards as one group: every call goes to all of them and waits for all, under one
    deadline; a failure names the shard (trainer-<rank>)."""

    def __init__(self, actors: list, deadlines: DeadlinesConfig):
        self.actors = actors
        self.deadlines = deadlines
        self.roles = [f"trainer-{rank}" for rank in range(len(actors))]
        # (data-parallel rank, size) of each shard, read once the group has joined.
        self.layout: list = []

    def __len__(self) -> int:
        return len(self.actors)

    def _all(self, refs: list, timeout_s: float, call: str) -> list:
        return wait(refs, self.roles, timeout_s, call)

    def join(self) -> None:
        """One process group: shard 0 names the rendezvous, every shard joins it."""
        if not self.actors:
            return
        setup_s = self.deadlines.placement_s
        address, port = wait([self.actors[0].rendezvous_address.remote()], self.roles[:1], setup_s,
                             "rendezvous_address")[0]
        self._all([t.join.remote(address, port) for t in self.actors], setup_s, "join")
        self.layout = self._all([t.dp_rank_and_size.remote() for t in self.actors], setup_s, "dp_rank_and_size")

    def train(self, samples: list, temperature: float, tokens: Any, rows: Any) -> list:
        """One update; tensor-parallel peers share a data-parallel rank and so get the same samples."""
        return self._all([t.train_step.remote(samples[rank::size], temperature, tokens, rows)
                          for t, (rank, size) in zip(self.actors, self.layout)], self.deadlines.train_step_s,
                         "train_step")

    def export_weights(self) -> tuple[Any, dict]:
        """(rank 0's weights, a safetensors file's bytes, as a Ray reference, rank 0's export metadata); every rank exports
        (a collective on sharded backends) and the driver never fetches the weights themselves."""
        exports = [t.export_weights.options(num_returns=2).remote() for t in self.actors]
        metas = self._all([meta for meta, _ in exports], self.deadlines.weight_sync_s, "export_weights")
        return exports[0][1], metas[0]

    def save_checkpoint(self, root: str, step: int, extra: dict) -> None:
        self._all([t.save_checkpoint.remote(root, step, extra) for t in self.actors], self.deadlines.checkpoint_s,
                  "save_checkpoint")

    def load_checkpoint(self, path: str) -> list:
        return self._all([t.load_checkpoint.remote(path) for t in self.actors], self.deadlines.checkpoint_s,
                         "load_checkpoint")

    def export_hf(self, path: str) -> None:
        self._all([t.export_hf.remote(path) for t in self.actors], self.deadlines.checkpoint_s, "export_hf")

    def close(self) -> None:
        self._all([t.close.remote() for t in self.actors], self.deadlines.checkpoint_s, "close")


class EpisodeLoops:
    """The episode actors' run() loops, as the driver sees them. A loop returns only at the end
    (training: after stop; eval: when the queue is empty); an actor that died is reported with
    Ray's reason so the driver can replace it; a loop that crashed raises its error here."""

    def __init__(self, refs: Optional[list] = None):
        self.refs = list(refs or [])

    def __len__(self) -> int:
        return len(self.refs)

    def start(self, index: int, actor) -> None:
        """Run `actor`'s loop as loop `index` (a new one, or the replacement of a dead one)."""
        ref = actor.run.remote()
        if index == len(self.refs):
            self.refs.append(ref)
        else:
            self.refs[index] = ref

    def ended(self, timeout_s: float) -> tuple[list, dict[int, str]]:
        """Waiting at most timeout_s (0: a look) for every loop to end: the results of those that
        returned, and {index: reason} of those whose actor died."""
        done, _ = ray.wait(self.refs, num_returns=len(self.refs), timeout=timeout_s)
        results, died = [], {}
        for ref in done:
            try:
                results.append(ray.get(ref, timeout=0))
            except RayActorError as err:  # its process or node died: the run goes on without that work
                died[self.refs.index(ref)] = str(err)
        return results, died


class WorkSource:
    """An episode actor's client of the work source: its calls wait at most
    deadlines.collector_call_s, and a dead or silent source is infra_error(env) for the episode."""

    def __init__(self, actor, timeout_s: float):
        self.actor = actor
        self.timeout_s = timeout_s

    def _call(self, method: str, *args):
        try:
            return ray.get(getattr(self.actor, method).remote(*args), timeout=self.timeout_s)
        except (RayActorError, GetTimeoutError) as err:
            raise InfraError(InfraSource.ENV, f"the work source's {method} failed: {type(err).__name__}: "
                                              f"{str(err).splitlines()[0][:200]}") from err

    def acquire(self, name: str):
        return self._call("acquire", name)

    def exchange(self, trajectory, name: str):
        return self._call("exchange", trajectory, name)
