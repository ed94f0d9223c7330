"""The docker backend against a stand-in `docker` CLI: the argv it is driven with and the lease logic
(lock-down, task images, reset and path checks, deadlines, host secrets, setup as root, a daemon that
stops answering). tests/envs/sandboxes/test_docker_sandbox_real.py runs the same bar for real."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

from configs.schema import SandboxConfig
from envs.outcomes import InfraError, InfraSource
from envs.sandboxes.container_sandbox import CONTAINER_ENV
from envs.sandboxes.docker_sandbox import DockerSandbox


# A stand-in docker CLI: logs its argv, runs `exec` on this host in the -w folder, does
# `cp` with tar streams. `kill -9 -1` is only logged (here it would hit the whole host).
FAKE_DOCKER = textwrap.dedent('''
    import io, json, os, shutil, subprocess, sys, tarfile, time
    log = os.environ["DOCKER_FAKE_LOG"]
    args = sys.argv[1:]
    with open(log, "a") as handle:
        handle.write(json.dumps(args) + "\\n")
    cmd = args[0]
    if cmd == "info":
        sys.exit(1)
    if cmd == "run":
        print("fakecontainer01")
    elif cmd == "inspect":
        if os.environ.get("DOCKER_FAKE_HANG") == "inspect":
            time.sleep(60)  # a daemon that stopped answering
        print("true")  # the container is running
    elif cmd == "exec":
        i, cwd, env = 1, "/", dict(os.environ)
        while args[i].startswith("-"):
            if args[i] == "-w": cwd = args[i + 1]
            if args[i] == "-e": env.update([args[i + 1].split("=", 1)])
            i += 2
        argv = args[i + 1:]
        if any("kill -9 -1" in arg for arg in argv) or argv[:3] == ["kill", "-9", "-1"]:
            sys.exit(0)  # never on this host: it would end every process we may signal
        sys.exit(subprocess.call(argv, cwd=cwd if os.path.isdir(cwd) else "/", env=env))
    elif cmd == "cp":
        src, dst = args[1], args[2]
        if src == "-":
            with tarfile.open(fileobj=io.BytesIO(sys.stdin.buffer.read())) as tar:
                tar.extractall(dst.split(":", 1)[1])
        elif dst == "-":
            path = src.split(":", 1)[1]
            if not os.path.exists(path):
                sys.stderr.write("Error: No such container:path\\n"); sys.exit(1)
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w") as tar:
                tar.add(path, arcname=os.path.basename(path))
            sys.stdout.buffer.write(buffer.getvalue())
        else:
            shutil.copytree(src, dst.split(":", 1)[1], symlinks=True, dirs_exist_ok=True)
''')


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "docker"
    script.write_text(f"#!{sys.executable}\n{FAKE_DOCKER}")
    script.chmod(0o755)
    log = tmp_path / "docker.log"
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("DOCKER_FAKE_LOG", str(log))

    def calls():
        import json

        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return calls


def test_container_is_started_locked_down_and_removed(fake_docker, make_docker_box, task_by_id):
    box = make_docker_box(memory_mb=512, max_processes=128, docker_image="python:3.11-slim")
    box.start(task_by_id["textkit-001"])
    run = next(call for call in fake_docker() if call[0] == "run")
    joined = " ".join(run)
    for flag in ("--network none", "--memory 512m", "--memory-swap 512m", "--pids-limit 128", "--read-only",
                 f"--ulimit fsize={64 * 1024 * 1024}", "--security-opt no-new-privileges",
                 "--entrypoint sleep python:3.11-slim infinity", "-d", "--tmpfs /tmp:rw,nosuid,nodev,exec,size=256m"):
        assert flag in joined
    assert "--user" not in run  # the lease's init is root (set-up, reset); the agent's commands are not
    mounts = [run[i + 1] for i, arg in enumerate(run) if arg == "--mount"]
    volumes = [m for m in mounts if m.startswith("type=volume,")]
    assert len(volumes) == 2 and all(f"volume-label=swerve.owner={os.getpid()}" in m for m in volumes)
    # The one other mount: the lease's gateway folder, read-only (tests/envs/sandboxes/test_gateway_route.py).
    gateway = box.gateway_dir()
    assert set(mounts) - set(volumes) == {f"type=bind,src={gateway},dst=/run/swerve-gateway,readonly"}
    assert box.container == "fakecontainer01" and box.last_start_s > 0
    result = box.exec("ls; echo err >&2; exit 3")
    assert result.exit_code == 3 and "textkit" in result.output and "err" in result.output
    execs = [call for call in fake_docker() if call[0] == "exec" and "timeout" in call]
    assert execs[-1][-3:] == ["bash", "-c", "ls; echo err >&2; exit 3"]
    assert execs[-1][execs[-1].index("--user") + 1] == "1000:1000"
    # After each command, what it left running is ended, as the agent's user.
    calls = fake_docker()
    sweep = next(c for c in calls[calls.index(execs[-1]) + 1:] if c[0] == "exec")
    assert sweep[:3] == ["exec", "--user", "1000:1000"] and "kill -9 -1" in sweep[-1]
    assert not any("E2B_API_KEY" in " ".join(call) for call in fake_docker())
    box.close()
    assert fake_docker()[-1] == ["rm", "-f", "-v", "fakecontainer01"]
    assert not gateway.parent.exists()
    with pytest.raises(InfraError, match="no open lease"):
        box.exec("true")


def test_task_image_is_used_and_nothing_uploaded(fake_docker, make_docker_box, task_by_id):
    task = task_by_id["textkit-001"]
    image_task = task.__class__(**{**task.__dict__, "image": "swebench/sweb.eval.x86_64.demo:latest"})
    make_docker_box().start(image_task)
    calls = fake_docker()
    assert "swebench/sweb.eval.x86_64.demo:latest" in next(c for c in calls if c[0] == "run")
    assert not any(c[0] == "cp" for c in calls)


@pytest.mark.slow
def test_files_reset_and_path_checks(fake_docker, make_docker_box, task_by_id):
    box = make_docker_box()
    box.start(task_by_id["textkit-001"])
    before = len(fake_docker())
    box.write_files({"notes/a.txt": "hello\nwörld", "notes/deep/b.txt": "b", "c.txt": "c"})
    assert box.read_files(["notes/a.txt", "notes/deep/b.txt", "c.txt"]) == {
        "notes/a.txt": "hello\nwörld", "notes/deep/b.txt": "b", "c.txt": "c"}
    batch = fake_docker()[before:]  # three files: one mkdir, one cp, one tar read
    assert batch[1] == ["cp", "-", f"fakecontainer01:{box.workdir}"] and batch[2][-4:] == ["--", "notes/a.txt", "notes/deep/b.txt", "c.txt"]
    assert len(batch) == 3 and "mkdir" in batch[0] and "tar" in batch[2]
    original = box.read_files(["textkit/case.py"])["textkit/case.py"]
    box.exec("echo broken > textkit/case.py")
    box.reset()
    assert box.read_files(["textkit/case.py"])["textkit/case.py"] == original and "notes" not in box.exec("ls").output
    for path in ("../x", "/etc/passwd", "a/../../x"):
        with pytest.raises(ValueError, match="workspace"):
            box.read_files([path])[path]
    with pytest.raises(InfraError, match="read 'missing.txt'"):
        box.read_files(["missing.txt"])["missing.txt"]


@pytest.mark.slow
def test_in_container_deadline_kills_the_command_group(fake_docker, make_docker_box, task_by_id):
    box = make_docker_box()
    box.start(task_by_id["textkit-001"])
    seconds = f"{400 + time.time() % 1:.6f}"
    started = time.monotonic()
    result = box.exec(f"sleep {seconds} & sleep {seconds}", timeout_s=1.0)
    assert time.monotonic() - started < 8 and result.timed_out and result.exit_code == 124
    time.sleep(0.3)
    assert subprocess.run(["pgrep", "-f", f"sleep {seconds}"], capture_output=True).stdout == b""


HOST_SECRETS = {"E2B_API_KEY": "e2b_fakefakefake0123456789", "OPENAI_API_KEY": "sk-fake0123456789abcdef",
                "HF_TOKEN": "hf_fake0123456789abcdef", "AWS_SECRET_ACCESS_KEY": "fake/aws+secret0123456789"}


def test_host_secrets_reach_neither_the_cli_nor_the_container(fake_docker, make_docker_box, task_by_id, monkeypatch):
    for name, value in HOST_SECRETS.items():
        monkeypatch.setenv(name, value)
    box = make_docker_box()
    box.start(task_by_id["textkit-001"])
    # The stand-in runs commands with the environment the CLI got plus its -e flags: both checked.
    output = box.exec("env").output
    calls = fake_docker()
    for name, value in HOST_SECRETS.items():
        assert name not in output and value not in output
        assert not any(value in " ".join(call) for call in calls)
    run = next(call for call in calls if call[0] == "run")
    assert not any(flag in run for flag in ("-e", "--env", "--env-file"))
    exec_env = [call[i + 1] for call in calls if call[0] == "exec" for i, arg in enumerate(call) if arg == "-e"]
    assert {item.split("=", 1)[0] for item in exec_env} <= set(CONTAINER_ENV)


def test_task_setup_runs_as_root_before_the_snapshot_and_its_environment_reaches_every_command(
        fake_docker, make_docker_box, task_by_id):
    import dataclasses

    task = dataclasses.replace(task_by_id["textkit-001"], setup=("export SWERVE_PROBE=activated",))
    box = make_docker_box()
    box.start(task)
    calls = fake_docker()
    setup = next(i for i, call in enumerate(calls) if call[0] == "exec" and "export SWERVE_PROBE=activated" in call[-1])
    assert calls[setup][1:5] == ["-u", "0", "-w", box.workdir]
    seal = next(i for i, call in enumerate(calls) if call[0] == "exec" and "chmod 700" in call[-1])
    assert setup < seal  # the pristine copy holds what the setup did
    assert box.exec("echo $SWERVE_PROBE").output == "activated\n"
    assert "SWERVE_PROBE=activated" in fake_docker()[-2]  # the command's exec, before the leftover sweep


@pytest.mark.slow
def test_a_daemon_that_stops_answering_is_an_infra_error_of_the_sandbox(fake_docker, make_docker_box, task_by_id,
                                                                       monkeypatch):
    box = make_docker_box(docker_cli_timeout_s=1.0)
    box.start(task_by_id["textkit-001"])
    monkeypatch.setenv("DOCKER_FAKE_HANG", "inspect")
    started = time.monotonic()
    # A failed command asks the daemon whether the container still runs; no answer is the
    # sandbox's fault, within the CLI timeout, never a raw TimeoutExpired out of the episode.
    with pytest.raises(InfraError) as caught:
        box.exec("exit 3")
    assert caught.value.source == InfraSource.SANDBOX and "inspect the container" in str(caught.value)
    assert time.monotonic() - started < 10


def test_missing_cli_is_an_infra_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InfraError, match="docker CLI"):
        DockerSandbox(SandboxConfig())
