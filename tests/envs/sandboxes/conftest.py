import pytest

from configs.schema import SandboxConfig
from envs.sandboxes.docker_sandbox import DockerSandbox


@pytest.fixture
def make_docker_box(tmp_path):
    """DockerSandbox leases with config overrides, each closed when the test ends."""
    made = []

    def make(**overrides):
        fields = {"container_workdir": str(tmp_path / "ctr" / "workspace"), **overrides}
        box = DockerSandbox(SandboxConfig(**fields))
        made.append(box)
        return box

    yield make
    for box in made:
        box.close()
