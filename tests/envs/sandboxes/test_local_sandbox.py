import os
import pwd
import signal
import shutil
import socket
import sys
import subprocess
import tempfile
import time
import uuid

import pytest

from configs.schema import SandboxConfig
from envs.sandboxes import local_sandbox as local_sandbox_module
from envs.sandboxes.local_sandbox import LocalSandbox, clean_env
from envs.outcomes import InfraError, InfraSource
from envs.sandboxes.sandbox import Sandbox

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


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


# ---- host secrets: environment, other processes, home -----------------------------------------

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


# ---- lease cgroups, output flood, cross-lease isolation ----------------------------------

import logging
import resource
import tracemalloc

from envs.sandboxes.cgroups import LeaseCgroup, cgroups_unavailable_reason

_NO_CGROUP = cgroups_unavailable_reason()
# Never run a fork bomb without a pids cgroup around it: as root RLIMIT_NPROC is not enforced.
needs_cgroup = pytest.mark.skipif(_NO_CGROUP is not None, reason=f"{_NO_CGROUP} (not root or no cgroup fs)")


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


_OWNER = """
import sys, time
from configs.schema import SandboxConfig
from envs.sandboxes.local_sandbox import LocalSandbox
from envs.tasks.task import Task
box = LocalSandbox(SandboxConfig(isolation="bwrap", cgroup="required", workdir_root=sys.argv[2]))
box.start(Task(id="t", repo="r", workspace_dir=sys.argv[1], problem_statement="", test_command="true",
               fail_to_pass=(), pass_to_pass=(), gold_patch="", stratum="", test_files=()))
assert box.exec("echo up").output == "up\\n"
print(box.jail_cgroup.procs_files[0], flush=True)
time.sleep(600)
"""


@needs_cgroup
@needs_bwrap
@pytest.mark.slow  # starts an owner process and its jail
def test_a_jail_left_by_a_killed_owner_is_ended_by_the_next_lease(tmp_path):
    """What the owner's stop() never reached (here a stopped process, as one caught in bwrap's
    set-up before its parent-death signal) is in the jail's cgroup, which the next lease's sweep
    ends once the owner is gone."""
    from pathlib import Path

    from envs.sandboxes.cgroups import LeaseCgroup, pid_alive

    (tmp_path / "repo").mkdir()
    owner = subprocess.Popen([sys.executable, "-c", _OWNER, str(tmp_path / "repo"), str(tmp_path)],
                             stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[3])
    straggler = None
    try:
        procs = Path(owner.stdout.readline().strip())
        assert procs.name == "cgroup.procs" and "-jail-" in procs.parent.name, procs
        jail = [int(pid) for pid in procs.read_text().split()]
        assert jail and all("bwrap" in Path(f"/proc/{pid}/cmdline").read_text() or "exec_server" in
                            Path(f"/proc/{pid}/cmdline").read_text() for pid in jail)
        # An orphan, as a jail's leftover is: init reaps it, not this test.
        straggler = int(subprocess.run(["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"], capture_output=True,
                                       text=True, check=True).stdout)
        procs.write_text(str(straggler))
        os.kill(straggler, signal.SIGSTOP)
        owner.kill()
        owner.wait(timeout=10)
        LeaseCgroup.create(64 * 2**20, 16).remove()  # any later lease sweeps the dead owner's cgroups
        assert not procs.parent.exists()
        deadline_s = time.monotonic() + 10
        while pid_alive(straggler) and time.monotonic() < deadline_s:
            time.sleep(0.05)
        assert not pid_alive(straggler)
    finally:
        owner.kill()
        if straggler is not None and pid_alive(straggler):
            os.kill(straggler, signal.SIGKILL)


# ---- what the agent leaves: reset and close never walk it here, and it is gone -----------------

# Each kind of tree that breaks a recursive walk or a plain rm: depth, count, mode, name, length.
_LEFTOVERS = {
    "depth 3000": "python3 -c 'import os; [(os.mkdir(\"d\"), os.chdir(\"d\")) for _ in range(3000)]'",
    "20000 files": "mkdir flood && cd flood && for d in $(seq 20); do mkdir $d && (cd $d && seq 1000 | xargs touch); done",
    "chmod 000": "mkdir -p locked/inner && touch locked/inner/f && chmod 000 locked/inner locked",
    "non-UTF-8 name": "touch $'bad\\xffname' && mkdir $'dir\\xfe' && touch $'dir\\xfe/x'",
    "past PATH_MAX": "mkdir long && cd long && for i in $(seq 40); do mkdir " + "p" * 200 + " && cd " + "p" * 200
                     + " || exit 1; done && touch leaf",
}


def _lease_leftovers(root) -> list:
    return sorted(name for name in os.listdir(root) if name.startswith("swerve-lease-"))


@pytest.mark.slow
def test_reset_and_close_delete_every_tree_the_agent_can_make(make_sandbox, isolation, task_by_id, tmp_path):
    box = make_sandbox(isolation=isolation)
    box.start(task_by_id["textkit-001"])
    pristine = sorted(os.listdir(box.workspace))
    for what, command in _LEFTOVERS.items():
        result = box.exec(command, timeout_s=120)
        assert result.exit_code == 0, (what, result.output[-2000:])
    assert box.exec("chmod 000 .").exit_code == 0  # the workspace root too (same uid as the host's)
    started_s = time.monotonic()
    box.reset()
    print(f"reset with {list(_LEFTOVERS)}: {time.monotonic() - started_s:.3f} s")
    assert sorted(os.listdir(box.workspace)) == pristine
    assert box.exec("ls -A").output.split() == pristine
    started_s = time.monotonic()
    box.close()
    print(f"close (waits for the deletions): {time.monotonic() - started_s:.3f} s")
    assert local_sandbox_module.wait_for_deleters() == []
    assert _lease_leftovers(tmp_path) == []


@pytest.mark.slow
def test_reset_of_twenty_thousand_files_returns_before_they_are_deleted(make_sandbox, task_by_id, tmp_path):
    box = make_sandbox(isolation="none")
    box.start(task_by_id["textkit-001"])
    assert box.exec(_LEFTOVERS["20000 files"], timeout_s=120).exit_code == 0
    started_s = time.monotonic()
    box.reset()
    print(f"reset with 20000 files: {time.monotonic() - started_s:.3f} s")
    assert not (box.workspace / "flood").exists()
    lease = box.workspace.parent.name
    assert [name for name in _lease_leftovers(tmp_path) if name != lease]  # moved aside, not walked
    box.close()
    assert local_sandbox_module.wait_for_deleters() == [] and _lease_leftovers(tmp_path) == []


@needs_bwrap
def test_a_workspace_root_chmod_000_still_runs_the_next_command(make_sandbox, task_by_id):
    box = make_sandbox(isolation="bwrap")
    box.start(task_by_id["textkit-001"])
    # Dirt in /tmp makes the next command start a fresh jail on the chmod'ed workspace.
    box.exec("chmod 000 /workspace; touch /tmp/dirt")
    result = box.exec("pwd; ls textkit")
    assert result.exit_code != 0 and "/workspace" in result.output  # the agent locked itself out
    box.reset()
    assert "case.py" in box.exec("ls textkit").output


def test_a_deleter_cannot_be_steered_by_a_link_in_place_of_the_tree(tmp_path):
    target = tmp_path / "host"
    (target / "keep").mkdir(parents=True)
    os.chmod(target / "keep", 0o500)
    link = tmp_path / "lease"
    link.symlink_to(target)
    assert local_sandbox_module.discard_tree(link) is None
    assert not os.path.lexists(link) and (target / "keep").is_dir()
    assert os.stat(target / "keep").st_mode & 0o777 == 0o500  # chmod -R never saw it
