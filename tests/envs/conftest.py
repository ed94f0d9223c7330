import shutil

import pytest

from configs.schema import SandboxConfig
from envs.sandboxes.cgroups import cgroups_unavailable_reason
from envs.sandboxes.local_sandbox import LocalSandbox
from envs.tasks.loaders import load_tasks

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
_NO_CGROUP = cgroups_unavailable_reason()
# Never run a fork bomb without a pids cgroup around it: as root RLIMIT_NPROC is not enforced.
needs_cgroup = pytest.mark.skipif(_NO_CGROUP is not None, reason=f"{_NO_CGROUP} (not root or no cgroup fs)")


@pytest.fixture(scope="session")
def all_tasks():
    return load_tasks(split="train") + load_tasks(split="eval")


@pytest.fixture
def task_by_id(all_tasks):
    return {task.id: task for task in all_tasks}


@pytest.fixture(params=["none", pytest.param("bwrap", marks=needs_bwrap)])
def isolation(request):
    return request.param


@pytest.fixture
def make_sandbox(tmp_path):
    """LocalSandbox factory; every sandbox made is closed after the test."""
    made = []

    def make(**overrides):
        fields = {"workdir_root": str(tmp_path), **overrides}
        sandbox = LocalSandbox(SandboxConfig(**fields))
        made.append(sandbox)
        return sandbox

    yield make
    for sandbox in made:
        sandbox.close()
