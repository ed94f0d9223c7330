import os

import pytest

# Tests build tiny models and tokenizers; keep them out of the user's cache and share them
# across the session.
os.environ.setdefault("RAY_DEDUP_LOGS", "0")


@pytest.fixture(scope="session")
def swerve_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("swerve-cache"))


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole test session (starting one costs ~5 s)."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="swerve-tests", log_to_driver=False)
    yield ray
    ray.shutdown()
