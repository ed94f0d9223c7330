"""The local sandbox (envs/sandboxes/local_sandbox.py): commands in a per-lease workspace copy, isolated with
bubblewrap (no network, another uid, only the allow-listed environment, no host home), bounded in
time, output and resources, and unable to reach another lease or the fix in a git history."""
import os
import pwd
import resource
import shutil
import socket
import subprocess
import tempfile
import time
import tracemalloc
import uuid

import pytest

from configs.schema import SandboxConfig
from envs.outcomes import InfraError, InfraSource
from envs.sandboxes import local_sandbox as local_sandbox_module
from envs.sandboxes.local_sandbox import LocalSandbox, clean_env
from envs.sandboxes.sandbox import Sandbox
from tests.envs.conftest import needs_bwrap, needs_cgroup


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    found.append(int(pid))
        except (FileNotFoundError, ProcessLookupError):
            continue  # the process exited while we looked
    return found


@pytest.fixture
def sandbox(make_sandbox, isolation, task_by_id):
    box = make_sandbox(isolation=isolation)
    box.start(task_by_id["textkit-001"])
    return box


def test_exec_runs_in_the_workspace(sandbox):
    result = sandbox.exec("ls; echo err >&2; exit 3")
    assert result.exit_code == 3 and not result.timed_out
    assert "textkit" in result.output and "pytest.ini" in result.output and "err" in result.output
    assert sandbox.last_start_s > 0 and isinstance(sandbox, Sandbox)


@pytest.mark.slow
def test_timeout_kills_the_process_group(sandbox):
    seconds = f"{100 + time.time() % 1:.6f}"
    started = time.monotonic()
    result = sandbox.exec(f"sleep {seconds} & sleep {seconds}", timeout_s=1.0)
    assert time.monotonic() - started < 5
    assert result.timed_out and result.exit_code == 124
    time.sleep(0.2)
    assert _processes_with(f"sleep\0{seconds}") == []


def test_output_flood_is_capped(make_sandbox, isolation, task_by_id):
    box = make_sandbox(isolation=isolation, max_output_bytes=100_000)
    box.start(task_by_id["textkit-001"])
    result = box.exec("yes | head -c 50000000; echo END")
    assert result.exit_code == 0 and result.output_truncated
    assert len(result.output) < 101_000
    assert result.output.startswith("y\ny\n") and result.output.endswith("END\n")
    assert "bytes of output elided" in result.output


def test_host_environment_is_not_visible(sandbox, monkeypatch):
    monkeypatch.setenv("E2B_API_KEY", "fake-secret-key")
    output = sandbox.exec("env").output
    assert "E2B_API_KEY" not in output and "fake-secret-key" not in output
    assert "HOME=/tmp" in output and "PYTHONDONTWRITEBYTECODE=1" in output


HOST_SECRETS = {"E2B_API_KEY": "e2b_fakefakefake0123456789", "OPENAI_API_KEY": "sk-fake0123456789abcdef",
                "HF_TOKEN": "hf_fake0123456789abcdef", "AWS_SECRET_ACCESS_KEY": "fake/aws+secret0123456789",
                "RAY_AUTH_TOKEN": "fakeraytoken0123456789"}


# What bash adds by itself to the environment it is given.
_SHELL_VARS = {"PWD", "SHLVL", "_", "OLDPWD"}


def test_commands_get_only_the_allow_listed_environment(sandbox, monkeypatch):
    for name, value in HOST_SECRETS.items():
        monkeypatch.setenv(name, value)
    names = {line.split("=", 1)[0] for line in sandbox.exec("env").output.splitlines() if "=" in line}
    assert names <= set(clean_env()) | _SHELL_VARS and "PATH" in names
    output = sandbox.exec("env; tr '\\0' '\\n' < /proc/self/environ; python -c 'import os; print(dict(os.environ))'").output
    for name, value in HOST_SECRETS.items():
        assert name not in output and value not in output


@pytest.fixture
def host_process_secret():
    """A host process (like a Ray worker holding E2B_API_KEY) with a secret in its environment."""
    secret = f"hostsecret{uuid.uuid4().hex}"
    process = subprocess.Popen(["sleep", "300"], env={"PATH": os.environ["PATH"], "SWERVE_FAKE_API_KEY": secret})
    yield secret, process.pid
    process.kill()
    process.wait()


def _read_environments(pid: int) -> str:
    """Every way to another process's environment: pid 1, a known host pid, any pid at all."""
    return (f"tr '\\0' '\\n' < /proc/1/environ; cat /proc/{pid}/environ; "
            "grep -a -h -o 'SWERVE_FAKE_API_KEY=[[:alnum:]]*' /proc/[0-9]*/environ; ls /proc")


def test_without_isolation_host_environments_are_readable(make_sandbox, task_by_id, host_process_secret):
    """The probe works: unisolated, a command reads host processes' secrets (why bwrap is the default)."""
    secret, pid = host_process_secret
    box = make_sandbox(isolation="none")
    box.start(task_by_id["textkit-001"])
    assert secret in box.exec(_read_environments(pid)).output


@needs_bwrap
def test_bwrap_hides_host_process_environments(make_sandbox, task_by_id, host_process_secret):
    secret, pid = host_process_secret
    box = make_sandbox(isolation="bwrap")
    box.start(task_by_id["textkit-001"])
    result = box.exec(_read_environments(pid))
    assert secret not in result.output and "SWERVE_FAKE_API_KEY" not in result.output
    # /proc/1 is the lease's exec server: not dumpable, so a command cannot read its environment
    # or open its pipes; the host pid is not in the jail's /proc.
    assert "/proc/1/environ: Permission denied" in result.output and str(pid) not in result.output.split()


def _home_probe(home: str) -> str:
    return f"cat {home}/.ssh/id_ed25519 {home}/.aws/credentials; ls -a {home} ~/.ssh ~/.aws"


@pytest.fixture
def fake_home(tmp_path, monkeypatch):
    """A home outside /tmp (the private /tmp alone would hide it) with an SSH key and AWS credentials."""
    home = tempfile.mkdtemp(prefix="swerve-home-", dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else tmp_path)
    secret = f"homesecret{uuid.uuid4().hex}"
    for name in (".ssh/id_ed25519", ".aws/credentials"):
        os.makedirs(os.path.dirname(os.path.join(home, name)), exist_ok=True)
        with open(os.path.join(home, name), "w") as handle:
            handle.write(secret + "\n")
    monkeypatch.setenv("HOME", home)
    yield home, secret
    shutil.rmtree(home)


def test_without_isolation_the_home_is_readable(make_sandbox, task_by_id, fake_home):
    home, secret = fake_home
    box = make_sandbox(isolation="none")
    box.start(task_by_id["textkit-001"])
    assert secret in box.exec(_home_probe(home)).output


@needs_bwrap
def test_bwrap_hides_the_hosts_home(make_sandbox, task_by_id, fake_home):
    home, secret = fake_home
    box = make_sandbox(isolation="bwrap")
    box.start(task_by_id["textkit-001"])
    result = box.exec(_home_probe(home))
    assert result.exit_code != 0 and secret not in result.output
    assert f"ls: cannot access '{home}': No such file or directory" in result.output
    # The real home: only the directory of an interpreter that lives there (pyenv, uv) shows.
    real_home = pwd.getpwuid(os.getuid()).pw_dir
    kept = {os.path.relpath(p, real_home).split(os.sep)[0] for p in local_sandbox_module._python_dirs()
            if p.startswith(real_home + os.sep)}
    listed = set(box.exec(f"ls -A {real_home}").output.split())
    assert listed & set(os.listdir(real_home)) <= kept
    for name in (".ssh", ".aws", ".ray", ".config", ".gitconfig", ".netrc"):
        assert box.exec(f"test -e {real_home}/{name}").exit_code != 0, name


def test_reset_restores_files(sandbox):
    original = sandbox.read_files(["textkit/case.py"])["textkit/case.py"]
    sandbox.exec("echo broken > textkit/case.py; touch extra.txt")
    assert sandbox.read_files(["textkit/case.py"])["textkit/case.py"] == "broken\n"
    sandbox.reset()
    assert sandbox.read_files(["textkit/case.py"])["textkit/case.py"] == original
    assert "extra.txt" not in sandbox.exec("ls").output


def test_file_paths_cannot_escape_the_workspace(sandbox):
    sandbox.write_files({"notes/a.txt": "hello"})
    assert sandbox.exec("cat notes/a.txt").output == "hello"
    sandbox.exec("ln -s /etc/hostname leak")
    for path in ("../outside.txt", "/etc/hostname", "leak", "notes/../../x"):
        with pytest.raises(ValueError, match="workspace"):
            sandbox.read_files([path])[path]
        with pytest.raises(ValueError, match="workspace"):
            sandbox.write_files({path: "x"})


def test_rlimits_bound_file_size_and_memory(make_sandbox, isolation, task_by_id):
    box = make_sandbox(isolation=isolation, max_file_mb=1, memory_mb=256)
    box.start(task_by_id["textkit-001"])
    assert box.exec("head -c 3000000 /dev/zero > big.bin").exit_code != 0
    assert os.path.getsize(box.workspace / "big.bin") <= 1024 * 1024
    hog = box.exec("python -c 'x = bytearray(600 * 1024 * 1024)'")
    assert hog.exit_code != 0 and "MemoryError" in hog.output


def test_start_replaces_the_lease_and_close_is_idempotent(make_sandbox, task_by_id):
    box = make_sandbox(isolation="none")
    box.start(task_by_id["textkit-001"])
    first = box.workspace
    box.start(task_by_id["inventory-001"])
    assert local_sandbox_module.wait_for_deleters() == []
    assert not first.exists() and (box.workspace / "inventory").is_dir()
    second = box.workspace
    box.close()
    box.close()
    assert not second.exists()
    with pytest.raises(InfraError) as error:
        box.exec("true")
    assert error.value.source is InfraSource.SANDBOX


def test_invalid_isolation_is_refused():
    with pytest.raises(ValueError, match="auto"):
        LocalSandbox(SandboxConfig(isolation="docker"))


def test_bwrap_required_but_missing_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InfraError, match="apt-get install bubblewrap"):
        LocalSandbox(SandboxConfig(isolation="bwrap"))


@needs_bwrap
def test_bwrap_has_no_network_and_another_uid(make_sandbox, task_by_id):
    box = make_sandbox(isolation="bwrap")
    box.start(task_by_id["textkit-001"])
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')"
        result = box.exec(f'python -c "{probe}"')
    assert result.exit_code != 0 and "CONNECTED" not in result.output
    assert box.exec("id -u").output.strip() == "1000"
    assert box.exec("pwd").output.strip() == "/workspace"


@needs_bwrap
def test_bwrap_writes_outside_the_workspace_fail(make_sandbox, task_by_id):
    box = make_sandbox(isolation="bwrap")
    box.start(task_by_id["textkit-001"])
    name = f"swerve-probe-{uuid.uuid4().hex}"
    for target in (f"/etc/{name}", f"/{name}", f"{box.workspace.parent}/{name}"):
        assert box.exec(f"echo x > {target}").exit_code != 0
        assert not os.path.exists(target)
    # /tmp is private: writable inside, invisible on the host.
    assert box.exec(f"echo x > /tmp/{name} && cat /tmp/{name}").output == "x\n"
    assert not os.path.exists(f"/tmp/{name}")


@pytest.mark.slow
@needs_cgroup
def test_timeout_kills_children_that_left_the_process_group(make_sandbox, isolation, task_by_id):
    box = make_sandbox(isolation=isolation, cgroup="required")
    box.start(task_by_id["textkit-001"])
    seconds = f"{200 + time.time() % 1:.6f}"
    result = box.exec(f"setsid sleep {seconds} & sleep {seconds}", timeout_s=1.0)
    assert result.timed_out and result.exit_code == 124
    time.sleep(0.2)
    assert _processes_with(f"sleep\0{seconds}") == []
    # A daemon left behind by a command that exited normally is ended too.
    box.exec(f"setsid sleep {seconds} > /dev/null 2>&1 < /dev/null &")
    assert _processes_with(f"sleep\0{seconds}") == []


@pytest.mark.slow
def test_one_gigabyte_flood_is_truncated_without_parent_memory_growth(make_sandbox, isolation, task_by_id):
    box = make_sandbox(isolation=isolation)
    box.start(task_by_id["textkit-001"])
    maxrss_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    try:
        result = box.exec("head -c 1000000000 /dev/zero | tr '\\0' 'a'; echo; echo END", timeout_s=300)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - maxrss_before_kib
    print(f"1 GB flood ({isolation}): {result.duration_s:.1f}s, tracemalloc peak {peak_bytes / 2**20:.1f} MiB, "
          f"ru_maxrss growth {growth_kib / 1024:.1f} MiB")
    assert result.exit_code == 0 and result.output_truncated and not result.timed_out
    assert len(result.output) < box.config.max_output_bytes + 1000 and result.output.endswith("END\n")
    assert "999" in result.output  # the elision marker counts ~999 MB dropped
    assert peak_bytes < 50 * 2**20 and growth_kib < 100 * 1024


@needs_bwrap
def test_a_lease_cannot_see_another_leases_files(task_by_id, tmp_path):
    # A root outside /tmp, so that the private /tmp is not what hides the other lease.
    root = tempfile.mkdtemp(prefix="swerve-test-", dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else tmp_path)
    first = LocalSandbox(SandboxConfig(isolation="bwrap", workdir_root=root))
    second = LocalSandbox(SandboxConfig(isolation="bwrap", workdir_root=root))
    try:
        first.start(task_by_id["textkit-001"])
        second.start(task_by_id["textkit-001"])
        first.write_files({"secret.txt": "first-lease-only"})
        assert first.exec("cat secret.txt").output == "first-lease-only"
        for probe in (f"cat {first.workspace}/secret.txt", f"ls {first.workspace}", f"ls {root}"):
            result = second.exec(probe)
            assert result.exit_code != 0 and "first-lease-only" not in result.output
        assert "secret.txt" not in second.exec("ls /workspace").output
    finally:
        first.close()
        second.close()
        shutil.rmtree(root, ignore_errors=True)


def test_a_git_workspace_keeps_its_files_but_not_the_history_holding_the_fix(tmp_path, task_by_id, isolation):
    import dataclasses
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "-C", str(repo)]
    (repo / "mod.py").write_text("def f():\n    return 1  # bug\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "bug"], check=True)
    (repo / "mod.py").write_text("def f():\n    return 2  # the fix\n")
    subprocess.run([*git, "commit", "-qam", "fix"], check=True)
    fix = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([*git, "reset", "-q", "--hard", "HEAD~1"], check=True)  # SWE-bench's state: fix in the reflog
    subprocess.run([*git, "stash", "list"], check=True)
    task = dataclasses.replace(task_by_id["textkit-001"], workspace_dir=str(repo))
    (tmp_path / "leases").mkdir()
    sandbox = LocalSandbox(SandboxConfig(isolation=isolation, workdir_root=str(tmp_path / "leases")))
    sandbox.start(task)
    try:
        assert "return 1" in sandbox.read_files(["mod.py"])["mod.py"]
        history = sandbox.exec("git log --all --reflog --oneline; git stash list; ls .git").output
        assert history.count("task start") == 1 and " bug" not in history and "ORIG_HEAD" not in history
        assert sandbox.exec(f"git cat-file -t {fix}").exit_code != 0
        assert sandbox.exec("git status --porcelain").output.strip() == ""
    finally:
        sandbox.close()
    assert subprocess.run([*git, "cat-file", "-t", fix], capture_output=True).returncode == 0  # the source is untouched
