"""Warm pool: ready leases kept per task, so `start(task)` need not wait for a cold start.

A ready lease is a backend instance on which `start(task)` already ran (workspace copied or
uploaded, probe done). `SandboxPool.start(task)` takes one when there is one ("warm") and
otherwise starts one itself ("cold"); either way a background thread then refills the task
up to `sandbox.pool_size` ready leases. At most `sandbox.pool_tasks` tasks keep ready leases
(least recently started dropped first) and a ready lease idle longer than
`sandbox.pool_max_idle_s` is closed, not used. `close()` closes the current lease and every
ready one, after waiting for a lease being prepared, so none leaks; a later `start` starts
the pool again.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from pathlib import Path
from typing import Callable, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

from configs.schema import SandboxConfig
from envs.outcomes import InfraError, InfraSource
from envs.sandboxes.sandbox import ExecResult, RoutedSandbox, Sandbox
from envs.tasks.task import Task

log = logging.getLogger(__name__)

BackendFactory = Callable[[SandboxConfig], Sandbox]


class SandboxPool:
    def __init__(self, make_backend: BackendFactory, config: SandboxConfig):
        if config.pool_size < 0 or config.pool_tasks < 1:
            raise ValueError(f"sandbox.pool_size={config.pool_size} must be >= 0, pool_tasks >= 1")
        self.config = config
        self._make_backend = make_backend
        # Made now so that a bad config is refused here, not in the refill thread.
        self.runs_images = make_backend(config).runs_images
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        # task id -> (ready_since_s, lease), oldest first; ordered least recently started first.
        self._ready: "collections.OrderedDict[str, Deque[Tuple[float, Sandbox]]]" = collections.OrderedDict()
        self._wanted: "collections.OrderedDict[str, Task]" = collections.OrderedDict()
        self._worker: Optional[threading.Thread] = None
        self._closing = False
        self._current: Optional[Sandbox] = None
        # Seconds the last start() took, and whether it took a ready lease.
        self.last_start_s: float = 0.0
        self.last_start_warm: bool = False
        self.start_times_s: Dict[str, List[float]] = {"cold": [], "warm": []}
        self.refill_errors = 0

    # ---- the Sandbox protocol --------------------------------------------------------------

    def start(self, task: Task) -> None:
        started_s = time.monotonic()
        self._close_current()
        lease = self._take_ready(task.id)
        warm = lease is not None
        if lease is None:
            lease = self._make_backend(self.config)
            try:
                lease.start(task)
            except BaseException:
                lease.close()
                raise
        self._current = lease
        self._request_refill(task)
        self.last_start_s = time.monotonic() - started_s
        self.last_start_warm = warm
        self.start_times_s["warm" if warm else "cold"].append(self.last_start_s)
        del self.start_times_s["warm" if warm else "cold"][:-1000]

    def exec(self, command: str, timeout_s: float | None = None) -> ExecResult:
        return self._lease().exec(command, timeout_s)

    def read_files(self, paths: Sequence[str]) -> Dict[str, str]:
        return self._lease().read_files(paths)

    def write_files(self, files: Mapping[str, str]) -> None:
        self._lease().write_files(files)

    def reset(self) -> None:
        self._lease().reset()

    def gateway_dir(self) -> Optional[Path]:
        """The open lease's gateway folder (envs/sandboxes/gateway_route.py); None where its backend has none."""
        lease = self._lease()
        return lease.gateway_dir() if isinstance(lease, RoutedSandbox) else None

    def close(self) -> None:
        """Close the current lease and every ready one; waits for a lease being prepared."""
        self._close_current()
        with self._lock:
            self._closing = True
            self._wanted.clear()
            self._wakeup.notify_all()
            worker = self._worker
        if worker is not None:
            worker.join()
        with self._lock:
            leases = [lease for queue in self._ready.values() for _, lease in queue]
            self._ready.clear()
            self._worker = None
            self._closing = False
        for lease in leases:
            _close_quietly(lease)

    # ---- pool state ------------------------------------------------------------------------

    @property
    def current(self) -> Optional[Sandbox]:
        """The backend instance holding the open lease (None between leases)."""
        return self._current

    def ready_count(self, task_id: Optional[str] = None) -> int:
        with self._lock:
            if task_id is not None:
                return len(self._ready.get(task_id, ()))
            return sum(len(queue) for queue in self._ready.values())

    def prepare(self, task: Task) -> None:
        """Start filling ready leases for a task before anyone asks for it."""
        self._request_refill(task)

    # ---- internals -------------------------------------------------------------------------

    def _lease(self) -> Sandbox:
        if self._current is None:
            raise InfraError(InfraSource.SANDBOX, "no open lease: call start(task) first")
        return self._current

    def _close_current(self) -> None:
        lease, self._current = self._current, None
        if lease is not None:
            lease.close()

    def _take_ready(self, task_id: str) -> Optional[Sandbox]:
        stale = []
        taken = None
        with self._lock:
            queue = self._ready.get(task_id)
            now_s = time.monotonic()
            while queue and taken is None:
                ready_since_s, lease = queue.popleft()
                if now_s - ready_since_s > self.config.pool_max_idle_s:
                    stale.append(lease)
                else:
                    taken = lease
        for lease in stale:
            _close_quietly(lease)
        return taken

    def _request_refill(self, task: Task) -> None:
        if self.config.pool_size <= 0:
            return
        evicted: List[Sandbox] = []
        with self._lock:
            self._wanted[task.id] = task
            self._wanted.move_to_end(task.id)
            self._ready.setdefault(task.id, collections.deque())
            self._ready.move_to_end(task.id)
            while len(self._ready) > self.config.pool_tasks:
                old_id, queue = self._ready.popitem(last=False)
                self._wanted.pop(old_id, None)
                evicted.extend(lease for _, lease in queue)
            if self._worker is None:
                self._worker = threading.Thread(target=self._refill_loop, name="sandbox-pool", daemon=True)
                self._worker.start()
            self._wakeup.notify_all()
        for lease in evicted:
            _close_quietly(lease)

    def _next_wanted(self) -> Optional[Task]:
        """Under the lock: the most recently started task that lacks ready leases."""
        for task_id in reversed(self._wanted):
            if len(self._ready.get(task_id, ())) < self.config.pool_size:
                return self._wanted[task_id]
        return None

    def _refill_loop(self) -> None:
        failures = 0
        while True:
            with self._lock:
                task = self._next_wanted()
                while task is None and not self._closing:
                    self._wakeup.wait()
                    task = self._next_wanted()
                if self._closing:
                    return
            lease = self._make_backend(self.config)
            try:
                lease.start(task)
            except Exception as error:  # noqa: BLE001 - a failed refill only costs a cold start later
                _close_quietly(lease)
                self.refill_errors += 1
                failures += 1
                log.warning("sandbox pool: preparing a lease of %s failed: %s", task.id, error)
                with self._lock:
                    self._wanted.pop(task.id, None)  # retried on the next start of that task
                    if self._closing:
                        return
                time.sleep(min(5.0, 0.1 * 2**failures))
                continue
            failures = 0
            with self._lock:
                keep = not self._closing and task.id in self._ready
                if keep:
                    self._ready[task.id].append((time.monotonic(), lease))
            if not keep:
                _close_quietly(lease)


def _close_quietly(lease: Sandbox) -> None:
    try:
        lease.close()
    except Exception as error:  # noqa: BLE001 - closing the rest matters more
        log.warning("sandbox pool: closing a lease failed: %s", error)


def pooled(backend_cls: BackendFactory) -> BackendFactory:
    """Registry entry: the backend wrapped in a SandboxPool when sandbox.pool_size > 0."""

    def build(config: SandboxConfig) -> Sandbox:
        if config.pool_size > 0:
            return SandboxPool(backend_cls, config)
        return backend_cls(config)

    build.backend_cls = backend_cls  # type: ignore[attr-defined]
    build.__name__ = f"pooled_{getattr(backend_cls, '__name__', 'backend')}"
    return build
