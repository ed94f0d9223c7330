import os
from pathlib import Path

import pytest

from actors.stages.policy_setup import ensure_policy
from configs import load_config
# Where the suite's time went, printed and written at the end of every run.
from tests.suite_clock import (pytest_runtest_logreport, pytest_sessionstart,  # noqa: F401
                               pytest_terminal_summary)
# Which tests share an xdist worker (the Docker tests; a module's tests that share a wide fixture).
pytest_plugins = ["tests.xdist_groups"]

# Tests build tiny models and tokenizers; keep them out of the user's cache and share them
# across the session.
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# Tests name the repository's files as a user at its root does (tests/smoke.yaml, configs/...): the
# root is found from this file, so `pytest` started from any folder, in any clone, reads the same files.
os.chdir(Path(__file__).resolve().parents[1])


@pytest.fixture(scope="session")
def swerve_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("swerve-cache"))


@pytest.fixture(scope="session", autouse=True)
def task_cache(tmp_path_factory):
    """Task workspaces, stream rows and quarantine records of the whole session, out of the user's
    cache. Set before Ray starts: its workers inherit it, where a test's monkeypatch never reaches
    (a stream's rows once outlived their test run there, in ~/.cache/swerve)."""
    os.environ["SWERVE_CACHE_DIR"] = str(tmp_path_factory.mktemp("task-cache"))
    return os.environ["SWERVE_CACHE_DIR"]


@pytest.fixture(scope="session")
def ray_session(task_cache):
    """One local Ray for the whole test session (starting one costs ~5 s)."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="swerve-tests", log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def docker_image():
    """A Docker engine for the session (started here when none answers and this machine can run
    one; stopped at the end, by its pid) and the offline-built base image's tag. Skips, with
    the reason, where no engine can run."""
    from envs.sandboxes import docker_engine

    pid, reason = docker_engine.start_engine()
    if reason is not None:
        pytest.skip(reason)
    try:
        yield docker_engine.ensure_base_image()
    finally:
        if pid is not None:
            docker_engine.stop_engine(pid)


# The run-sized tiny model of tests/smoke.yaml; tests/policies overrides these with a smaller one.
@pytest.fixture(scope="session")
def tiny_cfg(swerve_cache):
    return load_config("tests/smoke.yaml", [f"model.cache_dir={swerve_cache}", f"tokenizer.cache_dir={swerve_cache}"])


@pytest.fixture(scope="session")
def tiny_policy(tiny_cfg) -> tuple[str, str]:
    return ensure_policy(tiny_cfg)


@pytest.fixture(scope="session")
def tokenizer_path(tiny_policy):
    return tiny_policy[0]


@pytest.fixture(scope="session")
def model_path(tiny_policy):
    return tiny_policy[1]


# Test tiers: `make test-fast` runs `-m "not slow"`, the unit tests, in under 3 minutes on 2 cores.
# Whatever needs the shared Ray session is slow by definition; tests that start their own Ray, a
# server process, a training run or a process fleet, and any test one of whose cases takes over
# FAST_TEST_S (tests/suite_clock.py), carry `pytest.mark.slow` themselves. `make test` runs both
# tiers (-m "not check") within its budget; `make check` (-m check) runs the second tier: the rest of
# the catalogues and the soak runs, each listed with its reason in docs/contracts.md. Which tests share
# one of `make test`'s two xdist workers: tests/xdist_groups.py.
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "ray_session" in item.fixturenames or "docker_image" in item.fixturenames \
                or item.get_closest_marker("check"):
            item.add_marker(pytest.mark.slow)
