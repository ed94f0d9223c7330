"""The lease's exec server (envs/sandboxes/exec_channel.py, envs/sandboxes/jail/exec_server.py) behind LocalSandbox."""
import os
import signal
import time

import pytest

from envs.sandboxes import exec_channel
from envs.outcomes import InfraError, InfraSource
from tests.envs.conftest import needs_bwrap

pytestmark = needs_bwrap


@pytest.fixture
def jailed(make_sandbox, task_by_id):
    box = make_sandbox(isolation="bwrap")
    box.start(task_by_id["textkit-001"])
    return box


def _server_pid(box) -> int:
    """bwrap's pid on the host: the jail lives as long as it does."""
    return box._server.pid


def _jail_init_pid(box) -> int:
    """The exec server itself, pid 1 of the jail: bwrap's only child."""
    bwrap = _server_pid(box)
    with open(f"/proc/{bwrap}/task/{bwrap}/children") as handle:
        (child,) = handle.read().split()
    return int(child)


def test_a_command_can_neither_kill_nor_stop_nor_read_the_server(jailed):
    pid = _server_pid(jailed)
    result = jailed.exec("kill -KILL 1; kill -STOP 1; kill -INT 1; kill -TERM 1; ls /proc/1/fd; echo forged > /proc/1/fd/1")
    assert "Permission denied" in result.output
    assert jailed.exec("echo alive").output == "alive\n" and _server_pid(jailed) == pid


def test_each_command_starts_from_the_same_cwd_and_environment(jailed):
    pid = _server_pid(jailed)
    jailed.exec("cd /; export SWERVE_LEAK=1; ulimit -n 64")
    assert jailed.exec("pwd; echo ${SWERVE_LEAK:-unset}; ulimit -n").output.split()[:2] == ["/workspace", "unset"]
    assert int(jailed.exec("ulimit -n").output) > 64
    assert _server_pid(jailed) == pid  # a clean command keeps the server


@pytest.mark.parametrize("dirt", ["echo x > /tmp/planted", "mkdir -p /tmp/.local/lib && touch /tmp/.local/lib/x.pth",
                                  "ln -s /workspace /dev/shm/planted", "mkdir -p /dev/shm/a/b && touch /dev/shm/a/b/c",
                                  "ipcmk -M 4096"])
def test_what_a_command_leaves_in_the_jail_is_gone_for_the_next(jailed, dirt):
    # /tmp is empty but for bwrap's own binds (a venv that lives under /tmp, as in a CI clone there).
    probe = "ls -A /tmp; readlink /dev/stdin; ls -A /dev/shm | wc -l; ipcs -m | grep -c 0x"
    before = jailed.exec(probe).output
    assert before.split()[-3:] == ["/proc/self/fd/0", "0", "0"]
    pid = _server_pid(jailed)
    jailed.exec(dirt)
    assert jailed.exec(probe).output == before
    assert _server_pid(jailed) != pid  # a fresh jail: fresh /tmp, /dev and IPC namespace


def test_the_jails_dev_is_read_only_but_its_devices_work(jailed):
    pid = _server_pid(jailed)
    result = jailed.exec("rm /dev/stdin; ln -s /workspace /dev/planted; echo x > /dev/big; echo ok > /dev/null; echo $?")
    assert result.output.count("Read-only file system") == 3 and result.output.endswith("0\n"), result.output
    assert jailed.exec("readlink /dev/stdin; ls /dev | grep -c planted").output.split() == ["/proc/self/fd/0", "0"]
    assert _server_pid(jailed) == pid  # nothing was left: the jail is kept


def test_a_daemon_holding_the_output_open_ends_with_its_command(jailed):
    started = time.monotonic()
    result = jailed.exec("setsid sleep 300 & echo started", timeout_s=30)
    assert result.output == "started\n" and not result.timed_out
    assert time.monotonic() - started < 5
    assert jailed.exec("ps -e -o comm= | grep -c sleep").output.strip() == "0"


@pytest.mark.parametrize("jail_gone_first", [False, True])
def test_a_crashed_server_is_a_sandbox_infra_error_and_is_restarted(jailed, jail_gone_first):
    """Killed while the next request is written, or long before (its pipe already closed: the request
    stays unflushed, and closing the pipe once raised BrokenPipeError instead of the infra error)."""
    os.kill(_jail_init_pid(jailed), signal.SIGKILL)
    if jail_gone_first:
        jailed._server._proc.wait(timeout=10)
    with pytest.raises(InfraError) as raised:
        jailed.exec("echo hi")
    assert raised.value.source == InfraSource.SANDBOX and "exec server is gone" in str(raised.value)
    assert jailed.exec("echo back").output == "back\n"


@pytest.mark.slow
def test_a_hung_server_is_a_sandbox_infra_error_after_its_grace(jailed, monkeypatch):
    monkeypatch.setattr(exec_channel, "REPLY_GRACE_S", 0.5)
    hung = _jail_init_pid(jailed)
    os.kill(hung, signal.SIGSTOP)
    started = time.monotonic()
    with pytest.raises(InfraError, match="did not answer in time"):
        jailed.exec("echo hi", timeout_s=0.5)
    assert time.monotonic() - started < 5
    assert jailed.exec("echo back").output == "back\n"
    assert not os.path.exists(f"/proc/{hung}")  # the stopped server was killed, not left behind


def test_reset_starts_a_fresh_jail_for_grading(jailed):
    pid = _server_pid(jailed)
    jailed.exec("echo changed > README.md")
    jailed.reset()
    assert not (jailed.workspace / "README.md").exists() or "changed" not in jailed.read_files(["README.md"])["README.md"]
    assert jailed.exec("echo ok").output == "ok\n" and _server_pid(jailed) != pid


def test_close_leaves_no_process_of_the_jail(jailed):
    pids = (_server_pid(jailed), _jail_init_pid(jailed))
    jailed.exec("echo warm")
    jailed.close()
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)


def test_a_server_that_cannot_start_fails_the_lease_start_with_its_stderr(make_sandbox, task_by_id, monkeypatch):
    from envs.sandboxes import local_sandbox

    monkeypatch.setattr(local_sandbox, "server_command",
                        lambda python, bash: [python, "-E", "-s", "-S", f"{exec_channel.JAIL_CODE_MOUNT}/missing.py"])
    box = make_sandbox(isolation="bwrap")
    with pytest.raises(InfraError, match="exec server is gone.*missing.py"):
        box.start(task_by_id["textkit-001"])


def test_the_server_refuses_to_run_outside_a_pid_namespace_of_its_own():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-E", "-s", "-S", str(exec_channel.JAIL_CODE_DIR / "exec_server.py"),
                             "/bin/bash"], input=b'{"command": "true"}\n', capture_output=True, timeout=30)
    assert result.returncode != 0 and b"only as pid 1" in result.stderr and result.stdout == b""


@pytest.mark.parametrize("dirt", [
    "cd /tmp && python3 -c 'import os; [(os.mkdir(\"d\"), os.chdir(\"d\")) for _ in range(3000)]'",
    "mkdir /tmp/flood && cd /tmp/flood && seq 20000 | xargs touch",
    "mkdir -p /tmp/locked/inner && chmod 000 /tmp/locked/inner /tmp/locked",
    "touch /tmp/$'bad\\xffname' && mkdir /tmp/$'dir\\xfe'",
    "cd /tmp && for i in $(seq 30); do mkdir " + "p" * 200 + " && cd " + "p" * 200 + " || exit 1; done",
])
def test_scratch_dirt_the_server_cannot_list_is_a_fresh_jail_not_an_error(jailed, dirt):
    before = jailed.exec("ls -A /tmp").output
    pid = _server_pid(jailed)
    started_s = time.monotonic()
    result = jailed.exec(dirt, timeout_s=60)
    print(f"command and scratch check: {time.monotonic() - started_s:.2f} s")
    assert result.exit_code == 0, result.output
    assert jailed.exec("ls -A /tmp").output == before
    assert _server_pid(jailed) != pid
