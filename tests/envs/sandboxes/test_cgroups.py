"""Per-lease cgroups (envs/sandboxes/cgroups.py) under the local sandbox: one pids and memory limit over
everything a lease runs, a sure kill (a frozen lease whose owner died is thawed and removed), and a
lease that degrades with a warning where cgroups are not available."""
import logging
import subprocess
import time

import pytest

from configs.schema import SandboxConfig
from envs.outcomes import InfraError
from envs.sandboxes import local_sandbox as local_sandbox_module
from envs.sandboxes.cgroups import LeaseCgroup
from envs.sandboxes.local_sandbox import LocalSandbox
from tests.envs.conftest import needs_cgroup


@needs_cgroup
@pytest.mark.slow
def test_fork_bomb_is_contained_by_the_lease_cgroup(make_sandbox, isolation, task_by_id):
    box = make_sandbox(isolation=isolation, max_processes=64, cgroup="required")
    box.start(task_by_id["textkit-001"])
    assert box.cgroup.read("pids.max") == "64"
    started = time.monotonic()
    # The bomb forks in the background, then the command's own shell tries to go on. Whether
    # that shell wins a fork against the bomb is a race (bash retries a refused fork with
    # backoff), so the contract is: the command ends by its timeout at the latest, and is
    # reported either way.
    result = box.exec(":(){ :|:& };:; sleep 2; echo SURVIVED", timeout_s=10)
    assert time.monotonic() - started < 20
    assert result.timed_out or "SURVIVED" in result.output
    # The limit was hit (forks were refused) and nothing of the bomb survives the command.
    assert int(box.cgroup.read("pids.events").split()[-1]) > 0
    assert box.cgroup.pids() == []
    assert box.exec("echo alive").output == "alive\n"


@needs_cgroup
def test_a_frozen_lease_whose_owner_died_is_thawed_killed_and_removed():
    import subprocess
    from pathlib import Path

    from envs.sandboxes.cgroups import NAME_PREFIX, _sweep_stale

    freezer_root = Path("/sys/fs/cgroup/freezer")
    if not (freezer_root / "cgroup.procs").exists():
        pytest.skip("no cgroup v1 freezer here")
    child = subprocess.Popen(["true"])
    child.wait()
    dead_owner = child.pid  # exited and reaped: its pid names a dead owner
    stale = freezer_root / f"{NAME_PREFIX}{dead_owner}-frozentest"
    stale.mkdir()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (stale / "cgroup.procs").write_text(str(sleeper.pid))
        (stale / "freezer.state").write_text("FROZEN")
        # As when the owner died between freezing its lease and killing it: SIGKILL alone
        # stays pending on a frozen process.
        _sweep_stale(freezer_root)
        assert sleeper.wait(timeout=10) == -9
        for _ in range(50):
            if not stale.exists():
                break
            _sweep_stale(freezer_root)
            time.sleep(0.1)
        assert not stale.exists()
    finally:
        sleeper.kill()
        if stale.exists():
            (stale / "freezer.state").write_text("THAWED")


@needs_cgroup
@pytest.mark.slow
def test_lease_cgroup_bounds_memory_of_all_processes_together(make_sandbox, task_by_id):
    # Each hog stays under the per-process RLIMIT_AS; only the lease cgroup sees both.
    box = make_sandbox(isolation="none", memory_mb=300, cgroup="required")
    box.start(task_by_id["textkit-001"])
    assert int(box.cgroup.read("memory.limit_in_bytes" if box.cgroup.version == 1 else "memory.max")) <= 300 * 2**20
    hog = "python -c \"import time; a = b'x' * 200_000_000; time.sleep(3)\""
    result = box.exec(f"{hog} & p=$!; {hog}; echo B=$?; wait $p; echo A=$?", timeout_s=30)
    assert "=137" in result.output, result.output


@needs_cgroup
def test_commands_run_inside_the_lease_cgroup_and_close_removes_it(make_sandbox, task_by_id):
    box = make_sandbox(isolation="none", cgroup="required")
    box.start(task_by_id["textkit-001"])
    cgroup_dirs = list(box.cgroup.dirs.values())
    name = cgroup_dirs[0].name
    assert name in box.exec("cat /proc/self/cgroup").output
    box.close()
    assert not any(path.exists() for path in cgroup_dirs)


def test_without_cgroups_the_lease_degrades_with_a_warning(make_sandbox, task_by_id, monkeypatch, caplog):
    def refuse(*args, **kwargs):
        raise OSError("cgroup fs is read-only")

    monkeypatch.setattr(LeaseCgroup, "create", classmethod(refuse))
    monkeypatch.setattr(local_sandbox_module, "_warned_no_cgroup", False)
    box = make_sandbox(isolation="none")
    with caplog.at_level(logging.WARNING, logger="envs.sandboxes.local_sandbox"):
        box.start(task_by_id["textkit-001"])
    assert box.cgroup is None and box.exec("echo ok").output == "ok\n"
    assert "no per-lease cgroup" in caplog.text and "read-only" in caplog.text
    strict = make_sandbox(isolation="none", cgroup="required")
    with pytest.raises(InfraError, match="cgroup='required'"):
        strict.start(task_by_id["textkit-001"])


def test_invalid_cgroup_mode_is_refused():
    with pytest.raises(ValueError, match="required"):
        LocalSandbox(SandboxConfig(cgroup="sometimes"))
