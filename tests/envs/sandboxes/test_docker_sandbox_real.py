"""The docker backend with a real Docker engine (tests/conftest.py starts one where it can; without one
these tests skip): the lifecycle, limits, nothing outliving a command or a lease, no network, grading
on the pristine view, and a container killed under the agent as an infra error."""
import os
import subprocess
import sys
import textwrap

import pytest

from envs.grading.pristine_view import reset_or_replace
from envs.outcomes import InfraError, LeaseLost
from tests.envs.sandboxes.test_docker_sandbox import HOST_SECRETS

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_real_container_lifecycle(docker_image, make_docker_box, task_by_id):
    box = make_docker_box(docker_image=docker_image, container_workdir="/workspace", memory_mb=512, max_processes=64)
    box.start(task_by_id["textkit-001"])
    assert box.exec("id -u").output.strip() == "1000"
    assert box.exec("pwd").output.strip() == box.workdir
    assert box.exec("exit 7").exit_code == 7
    net = box.exec("python -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)\"")
    assert net.exit_code != 0
    assert box.exec("echo x > /etc/x").exit_code != 0
    box.write_files({"a.txt": "hi"})
    assert box.exec("cat a.txt").output == "hi"
    timed = box.exec("sleep 100 & sleep 100", timeout_s=1)
    assert timed.timed_out and timed.exit_code == 124
    # Whether the command's own shell wins a fork against the bomb is a race (bash retries a
    # refused fork with backoff): the contract is that the command ends by its timeout at the
    # latest, reported either way, and that nothing of the bomb outlives it.
    bomb = box.exec(":(){ :|:& };:; sleep 2; echo SURVIVED", timeout_s=10)
    assert bomb.timed_out or "SURVIVED" in bomb.output
    assert box.exec("echo alive").output == "alive\n"
    box.reset()
    assert "a.txt" not in box.exec("ls").output
    container = box.container
    box.close()
    listed = subprocess.run(["docker", "ps", "-aq", "--filter", f"id={container}"], capture_output=True, text=True)
    assert listed.stdout.strip() == ""


@pytest.fixture
def real_box(docker_image, make_docker_box):
    def make(**overrides):
        return make_docker_box(docker_image=docker_image, container_workdir="/workspace", **overrides)
    return make


def _ours(kind: str) -> list[str]:
    """This process's containers or volumes (by the owner label), as the engine lists them."""
    listing = subprocess.run(["docker", kind, "ls", "-q", *(["-a"] if kind == "container" else []),
                              "--filter", f"label=swerve.owner={os.getpid()}"], capture_output=True, text=True)
    return listing.stdout.split()


def test_limits_hold_in_a_real_container(real_box, task_by_id):
    box = real_box(memory_mb=256, max_file_mb=8, max_output_bytes=20_000)
    box.start(task_by_id["textkit-001"])
    hog = box.exec("python3 -c \"b = bytearray(600 * 1024 * 1024); print('allocated')\"")
    assert hog.exit_code != 0 and "allocated" not in hog.output  # killed at the memory cap (no swap)
    big = box.exec("head -c 20000000 /dev/zero > big.bin; echo rc=$?; stat -c %s big.bin")
    assert "rc=153" in big.output or "File too large" in big.output  # SIGXFSZ at max_file_mb
    assert int(big.output.split()[-1]) <= 8 * 1024 * 1024
    flood = box.exec("yes swerve | head -c 5000000")
    assert len(flood.output.encode()) <= 20_000 + 200 and flood.exit_code == 0
    for outside in ("/etc/x", "/x", "/usr/lib/x"):
        assert box.exec(f"touch {outside}").exit_code != 0, outside
    assert box.exec("touch /tmp/scratch && touch in_workspace && echo ok").output.strip() == "ok"
    assert box.exec("python3 -c 'print(1)'").output.strip() == "1"  # the lease survived all of it


def test_nothing_a_command_starts_outlives_it(real_box, task_by_id):
    box = real_box()
    box.start(task_by_id["textkit-001"])
    before = int(box.exec("ls /proc | grep -c '^[0-9]'").output)
    box.exec("sleep 300 & (sleep 301 &) ; setsid sleep 302 & echo started")
    # At most as many: a leaked process would add one, but the count before can include a process of
    # the previous exec still exiting (CI 2026-12-06 on a loaded machine: 6 before, 5 after).
    assert int(box.exec("ls /proc | grep -c '^[0-9]'").output) <= before
    assert "sleep 30" not in box.exec("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '").output


def test_host_secrets_never_reach_a_real_container(real_box, task_by_id, monkeypatch):
    for name, value in HOST_SECRETS.items():
        monkeypatch.setenv(name, value)
    box = real_box()
    box.start(task_by_id["textkit-001"])
    seen = box.exec("env; cat /proc/1/environ 2>&1 | tr '\\0' '\\n'").output
    assert not any(value in seen for value in HOST_SECRETS.values())


def test_no_network_and_no_network_made_per_sandbox(real_box, task_by_id):
    networks = subprocess.run(["docker", "network", "ls", "-q"], capture_output=True, text=True).stdout.split()
    boxes = [real_box() for _ in range(3)]
    for box in boxes:
        box.start(task_by_id["textkit-001"])
    interfaces = boxes[0].exec("cat /proc/net/dev | tail -n +3 | cut -d: -f1").output.split()
    assert interfaces == ["lo"]
    assert subprocess.run(["docker", "network", "ls", "-q"], capture_output=True, text=True).stdout.split() == networks


def test_a_lease_leaves_nothing_and_a_killed_owners_leases_are_swept(real_box, task_by_id, docker_image, tmp_path,
                                                                   monkeypatch):
    box = real_box()
    box.start(task_by_id["textkit-001"])
    assert len(_ours("container")) == 1 and len(_ours("volume")) == 2
    box.close()
    assert _ours("container") == [] and _ours("volume") == []
    # An owner SIGKILLed mid-lease: its container and volumes are gone after the next lease here.
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from configs.schema import SandboxConfig
        from envs.sandboxes.docker_sandbox import DockerSandbox
        from envs.tasks.loaders import load_tasks
        box = DockerSandbox(SandboxConfig(docker_image={docker_image!r}))
        box.start(load_tasks("builtin", "train", ["textkit-001"])[0])
        print(box.container, flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    orphan = child.stdout.readline().strip()
    os.kill(child.pid, 9)
    child.wait()
    labelled = subprocess.run(["docker", "ps", "-aq", "--no-trunc", "--filter", f"label=swerve.owner={child.pid}"],
                              capture_output=True, text=True).stdout.split()
    assert labelled == [orphan]
    import envs.sandboxes.docker_sandbox as docker_sandbox

    monkeypatch.setattr(docker_sandbox, "_swept", False)
    real_box().start(task_by_id["textkit-001"])
    for kind in ("ps -aq", "volume ls -q"):
        left = subprocess.run(["docker", *kind.split(), "--filter", f"label=swerve.owner={child.pid}"],
                              capture_output=True, text=True).stdout.split()
        assert left == [], kind


def test_grading_on_the_pristine_view_holds_in_a_real_container(real_box, task_by_id):
    """The tamper catalogue through the docker backend; the pristine twin is root's alone, so the
    agent cannot even write it."""
    from bench.adversarial.tamper_catalogue import CATALOGUE, TASK_ID, TamperAttempt, play
    from envs.sandboxes.container_sandbox import pristine_tree
    from envs.swe_env import SWEEnv

    task, box, env = task_by_id[TASK_ID], real_box(), SWEEnv()
    attempts = {a.name: a for a in CATALOGUE}
    conftest = attempts["conftest_pass_every_report"].commands[0]
    twin = TamperAttempt("edit_the_pristine_copy", "pristine", (conftest, f"cp conftest.py {pristine_tree(box.workdir)}/"),
                         fools_naive=True)
    for attempt in (*CATALOGUE, twin):
        played = play(attempt, env, task, sandbox=box)
        assert played["reward"] == 0.0, attempt.name
    env.reset(options={"task": task, "sandbox": box})
    assert box.exec(f"ls {pristine_tree(box.workdir)}").exit_code != 0  # root's alone
    env.step("```bash\nsed -i 's/if len(text) < width:/if len(text) <= width:/' textkit/wrap.py\n```")
    _, reward, _, _, info = env.step("```bash\nsubmit\n```")
    assert reward == 1.0 and info["tampered"] == {} and "+    if len(text) <= width:" in info["model_patch"]


def test_a_container_killed_under_the_agent_is_an_infra_error_not_a_failed_command(real_box, task_by_id):
    box = real_box()
    box.start(task_by_id["textkit-001"])
    assert box.exec("echo 'Error response from daemon: mimicked'; exit 1").exit_code == 1  # the agent's own words
    subprocess.run(["docker", "kill", box.container], capture_output=True, check=True)
    with pytest.raises(InfraError, match="is gone") as error:
        box.exec("true")
    assert error.value.source.value == "sandbox"
    # Killed before the grader's reset: the machinery's failure (re-run), not a restore the agent defeated (0).
    with pytest.raises(LeaseLost, match="is gone"):
        reset_or_replace(box, task_by_id["textkit-001"])
    box.start(task_by_id["textkit-001"])  # a fresh lease works again
    assert box.exec("echo back").output.strip() == "back"


def test_a_tasks_setup_prepares_a_real_container_for_the_agent_and_the_grader(real_box, task_by_id):
    """As a SWE-bench image's conda activation and a SWE-smith image's bug patch: run once as
    root, kept in the pristine copy, its environment in every command (a new bash each)."""
    import dataclasses

    from envs.tasks.loaders.common import ACTIVATE_TESTBED

    setup = ("export SWERVE_PROBE=activated", "PATH=/workspace/.bin:$PATH", "echo bug > added.txt", ACTIVATE_TESTBED)
    box = real_box()
    box.start(dataclasses.replace(task_by_id["textkit-001"], setup=setup))
    seen = box.exec("echo $SWERVE_PROBE; stat -c %u added.txt; echo $PATH; ls -a /tmp").output.split("\n")
    assert seen[:2] == ["activated", "1000"] and seen[2].startswith("/workspace/.bin:"), seen
    assert ".swerve-setup.log" not in seen  # nothing of the setup's output is left for the agent
    box.exec("rm added.txt")
    box.reset()
    assert box.exec("cat added.txt").output == "bug\n"
    with pytest.raises(InfraError, match="cannot activate"):
        real_box().start(dataclasses.replace(task_by_id["textkit-001"], setup=("echo cannot activate >&2; false",)))


def test_real_containers_tmp_is_capped_by_tmpfs_mb(docker_image, make_docker_box, task_by_id):
    box = make_docker_box(docker_image=docker_image, container_workdir="/workspace", tmpfs_mb=8)
    box.start(task_by_id["textkit-001"])
    result = box.exec("head -c 12M /dev/zero > /tmp/fill.bin")
    assert result.exit_code != 0 and "No space left on device" in result.output, result.output
    assert box.exec("df -m /tmp | tail -1").output.split()[1] == "8"
