"""The pieces the container backends share, run in a real bash: a task's setup and what it hands on; and
how their reset copes with what the agent left (in place, or a fresh container when it cannot)."""
import os
import subprocess
import time
from pathlib import Path

import pytest

from envs.sandboxes.container_sandbox import SETUP_LOG, setup_env, setup_script
from envs.tasks.loaders.common import ACTIVATE_TESTBED
from envs.outcomes import InfraError, InfraSource


def run(script: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=cwd,
                          env={"PATH": "/usr/bin:/bin", "KEEP": "same"})


def test_setup_runs_in_one_shell_and_hands_on_what_it_exported(tmp_path):
    setup = ("export PROBE=one; echo noise", "PATH=/opt/env/bin:$PATH", "cat > made.txt <<'EOF'\nbug\nEOF",
             ACTIVATE_TESTBED)  # no conda here: the image keeps its own interpreter
    done = run(setup_script(setup), tmp_path)
    assert done.returncode == 0, done.stderr
    # Only what setup changed, none of the shell's own state; its output is not in the listing.
    assert setup_env(done.stdout) == {"PROBE": "one", "PATH": "/opt/env/bin:/usr/bin:/bin"}
    assert (tmp_path / "made.txt").read_text() == "bug\n" and "noise" not in done.stdout


@pytest.mark.parametrize("failing", ["echo before; false", "echo before; exit 7"])
def test_setup_stops_at_the_first_failure_with_its_output(tmp_path, failing):
    done = run(setup_script((failing, "touch never")), tmp_path)
    assert done.returncode in (1, 7) and "before" in done.stderr and not (tmp_path / "never").exists()
    assert not Path(SETUP_LOG).exists()


def test_a_listing_that_is_not_two_environments_is_an_infra_error():
    with pytest.raises(InfraError) as caught:
        setup_env("garbage")
    assert caught.value.source == InfraSource.SANDBOX and "environment listings" in str(caught.value)


def test_the_setup_log_is_removed(tmp_path):
    assert run(setup_script(("echo some output",)), tmp_path).returncode == 0
    assert not Path(SETUP_LOG).exists()  # the agent's /tmp holds nothing of the setup


# ---- reset of what the agent left (the e2b backend against the offline envd; docker alike) -----

@pytest.fixture
def envd():
    pytest.importorskip("e2b")
    pytest.importorskip("aiohttp", reason="the in-test envd server runs on aiohttp (installed with ray[default])")
    from tests.envs.sandboxes.envd_server import FakeEnvd

    server = FakeEnvd().start()
    yield server
    server.stop()


@pytest.fixture
def e2b_box(envd, tmp_path, monkeypatch, task_by_id):
    from configs.schema import SandboxConfig
    from envs.sandboxes.e2b_sandbox import E2BSandbox

    server = envd
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setenv("E2B_SANDBOX_URL", server.url)
    monkeypatch.setenv("E2B_API_KEY", "e2b_test_key")
    box = E2BSandbox(SandboxConfig(container_workdir=str(tmp_path / "vm" / "workspace"), command_timeout_s=60.0))
    box.start(task_by_id["textkit-001"])
    yield box
    box.close()
    # pytest's own clean-up of old tmp dirs is recursive: it must never meet a deep tree.
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=True)


_AGENT_TREES = ("python3 -c 'import os; [(os.mkdir(\"d\"), os.chdir(\"d\")) for _ in range(3000)]' && "
                "mkdir flood && (cd flood && seq 20000 | xargs touch) && mkdir -p locked/in && chmod 000 locked/in locked"
                " && touch $'bad\\xffname' && echo broken > textkit/case.py")


@pytest.mark.slow
def test_a_container_reset_deletes_deep_many_and_odd_trees_in_place(e2b_box):
    pristine = e2b_box.exec("ls -A; cat textkit/case.py").output
    used = e2b_box._box
    assert e2b_box.exec(_AGENT_TREES, timeout_s=120).exit_code == 0
    started_s = time.monotonic()
    e2b_box.reset()
    print(f"container reset of 3000 deep + 20000 files: {time.monotonic() - started_s:.2f} s")
    assert e2b_box.exec("ls -A; cat textkit/case.py").output == pristine and e2b_box._box is used


def test_a_container_reset_that_cannot_complete_replaces_the_sandbox(e2b_box, monkeypatch):
    """The grader's reset (envs/grading/pristine_view.py): a restore the workspace defeats replaces the lease."""
    from envs.sandboxes import e2b_sandbox
    from envs.grading.pristine_view import reset_or_replace

    original = e2b_box.read_files(["textkit/case.py"])["textkit/case.py"]
    e2b_box.exec("echo broken > textkit/case.py")
    used = e2b_box._box  # offline, every sandbox has the same id: the client object tells them apart
    monkeypatch.setattr(e2b_sandbox, "restore_script", lambda workdir: "exit 1")  # as a restore past its deadline
    reason = reset_or_replace(e2b_box, e2b_box._task)
    assert "the sandbox was replaced" in reason
    assert e2b_box._box is not used and e2b_box.read_files(["textkit/case.py"])["textkit/case.py"] == original


def test_a_container_reset_whose_sandbox_is_gone_is_the_machinerys_failure_not_the_agents(e2b_box, envd):
    """A VM that cannot be reached when the grader resets it (gone, expired, its connection lost) is
    LeaseLost: the attempt is re-run, never scored 0 as a restore the agent's workspace defeated."""
    import asyncio

    from envs.grading.pristine_view import reset_or_replace
    from envs.outcomes import LeaseLost

    used = e2b_box._box
    asyncio.run_coroutine_threadsafe(envd._runner.cleanup(), envd._loop).result(timeout=10)  # the VM is gone
    envd._runner = None
    with pytest.raises(LeaseLost) as caught:
        reset_or_replace(e2b_box, e2b_box._task)
    assert caught.value.source == InfraSource.SANDBOX and "reset the workspace" in str(caught.value)
    assert e2b_box._box is used  # not replaced behind the grader


# A docker CLI whose restore fails (as one past docker_cli_timeout_s would): the rest succeeds.
_FAILING_RESTORE_DOCKER = '''
import json, os, sys
args = sys.argv[1:]
with open(os.environ["DOCKER_FAKE_LOG"], "a") as handle:
    handle.write(json.dumps(args) + "\\n")
if args[0] == "run":
    print("container%d" % sum(1 for _ in open(os.environ["DOCKER_FAKE_LOG"])))
elif args[0] == "inspect":
    print(os.environ.get("DOCKER_FAKE_RUNNING", "true"))
elif args[0] == "exec" and any("-delete" in arg for arg in args):
    sys.exit(1)
'''


@pytest.fixture
def failing_restore_docker(tmp_path, monkeypatch):
    import sys

    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "docker"
    script.write_text(f"#!{sys.executable}\n{_FAILING_RESTORE_DOCKER}")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("DOCKER_FAKE_LOG", str(tmp_path / "docker.log"))
    return tmp_path / "docker.log"


def test_a_docker_reset_that_cannot_complete_replaces_the_container(failing_restore_docker, task_by_id):
    import json

    from configs.schema import SandboxConfig
    from envs.sandboxes.docker_sandbox import DockerSandbox
    from envs.grading.pristine_view import reset_or_replace

    box = DockerSandbox(SandboxConfig(docker_image="python:3.11-slim"))
    box.start(task_by_id["textkit-001"])
    used = box.container
    assert "the sandbox was replaced" in reset_or_replace(box, task_by_id["textkit-001"])
    calls = [json.loads(line) for line in failing_restore_docker.read_text().splitlines()]
    assert box.container != used and ["rm", "-f", "-v", used] in calls
    assert [call[0] for call in calls].count("run") == 2
    box.close()


def test_a_docker_reset_under_which_the_container_died_is_the_machinerys_failure(failing_restore_docker, task_by_id,
                                                                                monkeypatch):
    """The container was killed (or its init OOM-killed) before the grader's reset: LeaseLost, so
    the attempt is re-run rather than scored 0, and no fresh container is made behind the grader."""
    import json

    from configs.schema import SandboxConfig
    from envs.sandboxes.docker_sandbox import DockerSandbox
    from envs.grading.pristine_view import reset_or_replace
    from envs.outcomes import LeaseLost

    box = DockerSandbox(SandboxConfig(docker_image="python:3.11-slim"))
    box.start(task_by_id["textkit-001"])
    monkeypatch.setenv("DOCKER_FAKE_RUNNING", "false")
    with pytest.raises(LeaseLost, match="is gone"):
        reset_or_replace(box, task_by_id["textkit-001"])
    calls = [json.loads(line) for line in failing_restore_docker.read_text().splitlines()]
    assert [call[0] for call in calls].count("run") == 1
    box.close()
