import glob
import statistics
import threading
import time

import pytest

from actors.episodes.sandbox_actor import SANDBOX_BACKENDS
from configs.loader import load_config
from configs.schema import SandboxConfig
from envs.sandboxes.local_sandbox import LocalSandbox
from envs.sandboxes.sandbox import Sandbox
from envs.sandboxes.sandbox_pool import SandboxPool


def wait_ready(pool: SandboxPool, task_id: str, timeout_s: float = 30.0) -> bool:
    """Block until the pool holds pool_size ready leases of a task (they are refilled in the background)."""
    deadline_s = time.monotonic() + timeout_s
    while pool.ready_count(task_id) < pool.config.pool_size:
        if time.monotonic() > deadline_s:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def make_pool(tmp_path):
    made = []

    def make(backend=LocalSandbox, **overrides):
        fields = {"workdir_root": str(tmp_path), "pool_size": 1, **overrides}
        pool = SandboxPool(backend, SandboxConfig(**fields))
        made.append(pool)
        return pool

    yield make
    for pool in made:
        pool.close()


def _lease_dirs(root) -> list:
    return glob.glob(f"{root}/swerve-lease-*")


@pytest.mark.slow
def test_warm_start_takes_a_ready_lease_and_is_faster(make_pool, task_by_id, tmp_path):
    pool = make_pool(pool_size=1)
    task = task_by_id["textkit-001"]
    assert isinstance(pool, Sandbox)
    cold, warm = [], []
    for _ in range(5):
        pool.close()  # drops ready leases: the next start is cold
        pool.start(task)
        assert not pool.last_start_warm
        cold.append(pool.last_start_s)
        assert wait_ready(pool, task.id)
        pool.start(task)
        assert pool.last_start_warm
        warm.append(pool.last_start_s)
        assert "textkit" in pool.exec("ls").output
    cold_p50, warm_p50 = statistics.median(cold), statistics.median(warm)
    print(f"start p50: cold {cold_p50 * 1000:.1f} ms, warm {warm_p50 * 1000:.1f} ms "
          f"(isolated={pool.current.isolated}, cgroup={pool.current.cgroup is not None})")
    assert warm_p50 < cold_p50
    assert pool.start_times_s["warm"] == warm and pool.start_times_s["cold"] == cold


def test_a_warm_lease_is_fresh(make_pool, task_by_id):
    pool = make_pool(pool_size=2)
    task = task_by_id["textkit-001"]
    pool.start(task)
    pool.exec("echo broken > textkit/case.py; touch extra.txt")
    assert wait_ready(pool, task.id)
    pool.start(task)
    assert pool.last_start_warm
    assert "extra.txt" not in pool.exec("ls").output and "broken" not in pool.read_files(["textkit/case.py"])["textkit/case.py"]
    pool.write_files({"x.txt": "x"})
    pool.reset()
    assert "x.txt" not in pool.exec("ls").output


def test_close_leaves_no_lease_behind(make_pool, task_by_id, tmp_path):
    pool = make_pool(pool_size=3)
    task = task_by_id["textkit-001"]
    pool.start(task)
    assert wait_ready(pool, task.id)
    cgroups = [p for lease in [pool.current] for p in (lease.cgroup.dirs.values() if lease.cgroup else [])]
    assert len(_lease_dirs(tmp_path)) == 4
    pool.close()
    assert _lease_dirs(tmp_path) == [] and pool.ready_count() == 0
    assert not any(p.exists() for p in cgroups)
    assert not any(t.name == "sandbox-pool" for t in threading.enumerate() if t.is_alive())
    # Closing while a lease is being prepared waits for it and closes it too.
    pool.start(task)
    pool.close()
    assert _lease_dirs(tmp_path) == []
    pool.close()  # idempotent


def test_only_recent_tasks_keep_ready_leases(make_pool, task_by_id, tmp_path):
    pool = make_pool(pool_size=1, pool_tasks=1)
    first, second = task_by_id["textkit-001"], task_by_id["inventory-001"]
    pool.start(first)
    assert wait_ready(pool, first.id)
    pool.start(second)
    assert wait_ready(pool, second.id)
    assert pool.ready_count(first.id) == 0 and pool.ready_count() == 1
    assert len(_lease_dirs(tmp_path)) == 2  # the current lease and one ready lease


def test_idle_ready_leases_are_not_used(make_pool, task_by_id):
    pool = make_pool(pool_size=1, pool_max_idle_s=0.0)
    task = task_by_id["textkit-001"]
    pool.start(task)
    assert wait_ready(pool, task.id)
    time.sleep(0.01)
    pool.start(task)
    assert not pool.last_start_warm


def test_a_failing_refill_costs_only_a_cold_start(make_pool, task_by_id):
    calls = []

    class Flaky(LocalSandbox):
        def start(self, task):
            calls.append(task.id)
            if len(calls) == 2:  # the first background preparation fails
                raise RuntimeError("boom")
            super().start(task)

    pool = make_pool(backend=Flaky, pool_size=1)
    task = task_by_id["textkit-001"]
    pool.start(task)
    deadline = time.monotonic() + 10
    while pool.refill_errors == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool.refill_errors == 1
    pool.start(task)
    assert not pool.last_start_warm and pool.exec("echo ok").output == "ok\n"


def test_registry_builds_every_backend_from_config(tmp_path):
    assert set(SANDBOX_BACKENDS) >= {"local", "e2b", "docker"}
    pooled = SANDBOX_BACKENDS["local"](SandboxConfig(pool_size=2, workdir_root=str(tmp_path)))
    assert isinstance(pooled, SandboxPool) and pooled.config.pool_size == 2
    plain = SANDBOX_BACKENDS["local"](SandboxConfig(pool_size=0))
    assert isinstance(plain, LocalSandbox)
    assert SANDBOX_BACKENDS["e2b"].backend_cls.__name__ == "E2BSandbox"
    assert SANDBOX_BACKENDS["docker"].backend_cls.__name__ == "DockerSandbox"
    for backend in ("local", "e2b", "docker"):
        assert load_config(overrides=[f"sandbox.backend={backend}"]).sandbox.backend == backend
    with pytest.raises(ValueError, match="isolation"):
        SANDBOX_BACKENDS["local"](SandboxConfig(pool_size=1, isolation="nope"))
