"""The e2b backend against the unmodified e2b SDK, offline: the SDK in debug mode talks to an
in-test envd (tests/envs/sandboxes/envd_server.py) on a free 127.0.0.1 port given as E2B_SANDBOX_URL,
so port 49983 (the debug default) need not be free and nothing leaves this host."""
import base64
import os
import time

import pytest

pytest.importorskip("e2b")
pytest.importorskip("aiohttp", reason="the in-test envd server runs on aiohttp (installed with ray[default])")

import e2b  # noqa: E402

from configs.schema import SandboxConfig  # noqa: E402
from envs.sandboxes.container_sandbox import CONTAINER_ENV  # noqa: E402
from envs.sandboxes import e2b_sandbox  # noqa: E402
from envs.sandboxes.e2b_sandbox import E2BSandbox  # noqa: E402
from envs.outcomes import InfraError  # noqa: E402
from envs.sandboxes.sandbox import Sandbox  # noqa: E402
from tests.envs.sandboxes.envd_server import FakeEnvd  # noqa: E402

SECRET = "e2b_test_secret_key_0123456789"


@pytest.fixture(scope="module")
def envd():
    server = FakeEnvd().start()
    yield server
    server.stop()


@pytest.fixture
def e2b_env(envd, monkeypatch):
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setenv("E2B_SANDBOX_URL", envd.url)
    monkeypatch.setenv("E2B_API_KEY", SECRET)
    return envd


@pytest.fixture
def make_box(e2b_env, tmp_path):
    made = []

    def make(**overrides):
        fields = {"container_workdir": str(tmp_path / "vm" / "workspace"), "command_timeout_s": 20.0, **overrides}
        box = E2BSandbox(SandboxConfig(**fields))
        made.append(box)
        return box

    yield make
    for box in made:
        box.close()


@pytest.fixture
def box(make_box, task_by_id):
    sandbox = make_box()
    sandbox.start(task_by_id["textkit-001"])
    return sandbox


def test_runs_commands_as_root_in_the_uploaded_workspace(box, e2b_env):
    result = box.exec("ls; pwd; echo err >&2; exit 3")
    assert isinstance(box, Sandbox) and box.last_start_s > 0
    assert box.gateway_dir() is None  # no host folder reaches a cloud VM (envs/sandboxes/gateway_route.py)
    # A non-zero exit (which the SDK raises) is an ordinary result.
    assert result.exit_code == 3 and not result.timed_out
    assert "textkit" in result.output and "pytest.ini" in result.output and "err" in result.output
    assert box.workdir in result.output
    assert e2b_env.process.authorizations[-1] == "Basic " + base64.b64encode(b"root:").decode()
    # The upload kept file modes and the original tree.
    assert box.exec("test -f textkit/case.py && echo yes").output == "yes\n"


@pytest.mark.slow
def test_output_streams_and_is_capped(make_box, task_by_id):
    box = make_box(max_output_bytes=100_000)
    box.start(task_by_id["textkit-001"])
    result = box.exec("for i in 1 2 3; do echo line$i; sleep 0.2; done; echo err >&2")
    assert result.output == "line1\nline2\nline3\nerr\n" and result.duration_s >= 0.6
    flood = box.exec("yes | head -c 20000000; echo END")
    assert flood.exit_code == 0 and flood.output_truncated and len(flood.output) < 101_000
    assert flood.output.startswith("y\ny\n") and flood.output.endswith("END\n")


@pytest.mark.slow
def test_timeout_kills_the_command_and_its_children(box):
    seconds = f"{300 + time.time() % 1:.6f}"
    started = time.monotonic()
    result = box.exec(f"sleep {seconds} & sleep {seconds}", timeout_s=1.0)
    assert time.monotonic() - started < 8
    assert result.timed_out and result.exit_code == 124
    time.sleep(0.3)
    assert [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).startswith(f"sleep\0{seconds}")] == []
    assert box.exec("echo still-usable").output == "still-usable\n"


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def test_files_read_write_and_paths_stay_in_the_workspace(box):
    box.write_files({"notes/a.txt": "hello\nwörld"})
    assert box.read_files(["notes/a.txt"])["notes/a.txt"] == "hello\nwörld"
    assert box.exec("cat notes/a.txt").output == "hello\nwörld"
    for path in ("../outside.txt", "/etc/hostname", "notes/../../x"):
        with pytest.raises(ValueError, match="workspace"):
            box.read_files([path])[path]
        with pytest.raises(ValueError, match="workspace"):
            box.write_files({path: "x"})
    with pytest.raises(InfraError, match="cannot read"):
        box.read_files(["missing.txt"])["missing.txt"]


@pytest.mark.slow
def test_reset_restores_the_workspace(box):
    original = box.read_files(["textkit/case.py"])["textkit/case.py"]
    box.exec("echo broken > textkit/case.py; touch extra.txt")
    box.reset()
    assert box.read_files(["textkit/case.py"])["textkit/case.py"] == original
    assert "extra.txt" not in box.exec("ls").output


def test_api_key_never_reaches_the_sandbox(box, e2b_env, caplog):
    output = box.exec("env").output
    assert SECRET not in output and "E2B_API_KEY" not in output
    assert all(SECRET not in str(dict(req.process.envs)) for req in e2b_env.process.started)
    assert SECRET not in caplog.text


def test_no_host_secret_reaches_the_sandbox(make_box, task_by_id, e2b_env, monkeypatch):
    others = {"OPENAI_API_KEY": "sk-fake0123456789abcdef", "HF_TOKEN": "hf_fake0123456789abcdef",
              "AWS_SECRET_ACCESS_KEY": "fake/aws+secret0123456789", "RAY_AUTH_TOKEN": "fakeraytoken0123456789"}
    for name, value in others.items():
        monkeypatch.setenv(name, value)
    box = make_box()
    box.start(task_by_id["textkit-001"])
    output = box.exec("env").output
    for value in (SECRET, *others.values()):
        assert value not in output
    # Every process started in the sandbox got CONTAINER_ENV at most, nothing of the host.
    assert all(set(dict(req.process.envs)) <= set(CONTAINER_ENV) for req in e2b_env.process.started)


class _Clock:
    """The time module, with a monotonic clock the test moves forward."""

    def __init__(self):
        self.offset_s = 0.0

    def __getattr__(self, name):
        return getattr(time, name)

    def monotonic(self) -> float:
        return time.monotonic() + self.offset_s


@pytest.mark.slow
def test_template_timeout_keepalive_and_kill_on_close(make_box, task_by_id, monkeypatch, e2b_env):
    created, renewed, killed = [], [], []
    real_create = e2b.Sandbox.create

    def create(*args, **kwargs):
        created.append(kwargs)
        return real_create(*args, **kwargs)

    monkeypatch.setattr(e2b.Sandbox, "create", create)
    monkeypatch.setattr(e2b.Sandbox, "set_timeout", lambda self, timeout, **kw: renewed.append(timeout))
    monkeypatch.setattr(e2b.Sandbox, "kill", lambda self, **kw: killed.append(self.sandbox_id) or True)
    clock = _Clock()  # the lease's clock, moved by the test (a loaded machine's start can take seconds)
    monkeypatch.setattr(e2b_sandbox, "time", clock)
    box = make_box(e2b_template="swerve-base", e2b_timeout_s=30)
    box.start(task_by_id["textkit-001"])
    assert created[-1]["template"] == "swerve-base" and created[-1]["timeout"] == 30
    assert created[-1]["allow_internet_access"] is False
    box.exec("true")
    assert renewed == []  # used within a third of its lifetime: nothing to renew
    clock.offset_s += 11  # past a third of the lifetime: the next use renews it
    box.exec("true")
    assert renewed == [30]
    box.close()
    assert len(killed) == 1
    box.close()
    assert len(killed) == 1
    with pytest.raises(InfraError, match="no open lease"):
        box.exec("true")
    # A task's own image is its template (its repository is already in the image).
    image_task = task_by_id["textkit-001"].__class__(**{**task_by_id["textkit-001"].__dict__, "image": "swe-img:1"})
    uploads = len(e2b_env.files_written)
    box.start(image_task)
    assert created[-1]["template"] == "swe-img:1"
    assert len(e2b_env.files_written) == uploads  # nothing uploaded: the image brings the repository


def test_missing_api_key_is_an_infra_error(monkeypatch, task_by_id, tmp_path):
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    box = E2BSandbox(SandboxConfig(container_workdir=str(tmp_path / "ws")))
    with pytest.raises(InfraError, match="E2B_API_KEY"):
        box.start(task_by_id["textkit-001"])


def test_debug_mode_goes_to_the_given_envd_url_not_a_fixed_port(e2b_env):
    # Why these tests need not check that port 49983 is free: E2B_SANDBOX_URL wins over it.
    from e2b.connection_config import ConnectionConfig

    config = ConnectionConfig()
    assert config.debug and config.get_sandbox_url("any-id", "") == e2b_env.url
    assert e2b_env.url.startswith("http://127.0.0.1:")


def test_client_deadline_kills_the_command_through_envd(box, e2b_env, monkeypatch):
    # Make the SDK's stream deadline fire before the in-sandbox one: the backend must kill.
    import envs.sandboxes.e2b_sandbox as e2b_sandbox_module

    monkeypatch.setattr(e2b_sandbox_module, "CLIENT_GRACE_S", -1.5)
    before = len(e2b_env.process.signals)
    started = time.monotonic()
    result = box.exec("sleep 30", timeout_s=2.0)
    assert time.monotonic() - started < 5
    assert result.timed_out and result.exit_code == 124
    assert len(e2b_env.process.signals) == before + 1


@pytest.mark.slow
def test_an_owner_that_exits_without_closing_kills_its_sandbox(e2b_env, task_by_id, tmp_path):
    import subprocess
    import sys

    script = f"""
import e2b
e2b.Sandbox.kill = lambda self, **kw: print("KILLED", self.sandbox_id, flush=True) or True
from configs.schema import SandboxConfig
from envs.sandboxes.e2b_sandbox import E2BSandbox
from envs.tasks.task import HiddenCase, Task  # the task's repr names both
box = E2BSandbox(SandboxConfig(container_workdir={str(tmp_path / 'owner' / 'ws')!r}))
task = Task(**{repr(task_by_id["textkit-001"].__dict__)})
box.start(task)
print("STARTED", flush=True)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))), env=dict(os.environ))
    assert "STARTED" in done.stdout and "KILLED debug_sandbox_id" in done.stdout, done.stderr[-2000:]


@pytest.mark.slow
def test_grading_on_the_pristine_view_holds_in_e2b(make_box, task_by_id):
    """The catalogue's exploits through the e2b backend, and one only a container allows: the
    pristine copy lives in the sandbox, so the agent edits it too (caught by the start listing)."""
    from bench.adversarial.tamper_catalogue import CATALOGUE, TASK_ID, TamperAttempt, play
    from envs.sandboxes.container_sandbox import pristine_tree
    from envs.grading.pristine_view import PRISTINE_ALTERED
    from envs.swe_env import SWEEnv

    task, box, env = task_by_id[TASK_ID], make_box(), SWEEnv()
    attempts = {a.name: a for a in CATALOGUE}
    conftest = attempts["conftest_pass_every_report"].commands[0]
    twin = TamperAttempt("edit_the_pristine_copy", "pristine", (conftest, f"cp conftest.py {pristine_tree(box.workdir)}/"),
                         fools_naive=True)
    for attempt in (attempts["conftest_pass_every_report"], attempts["fake_pytest_module"], twin):
        played = play(attempt, env, task, sandbox=box)
        assert played["reward"] == 0.0 and played["tampered"], attempt.name
    assert PRISTINE_ALTERED in played["tampered"]
    env.reset(options={"task": task, "sandbox": box})
    env.step("```bash\nsed -i 's/if len(text) < width:/if len(text) <= width:/' textkit/wrap.py\n```")
    _, reward, _, _, info = env.step("```bash\nsubmit\n```")
    assert reward == 1.0 and info["tampered"] == {} and "+    if len(text) <= width:" in info["model_patch"]


@pytest.mark.slow
def test_task_setup_runs_once_before_the_snapshot_and_its_environment_reaches_every_command(make_box, task_by_id):
    import dataclasses

    task = dataclasses.replace(task_by_id["textkit-001"], setup=("export SWERVE_PROBE=activated", "echo bug > added.txt"))
    box = make_box()
    box.start(task)
    assert box.exec("echo $SWERVE_PROBE; cat added.txt").output == "activated\nbug\n"
    box.exec("rm added.txt")
    box.reset()  # the pristine copy was taken after the setup: its changes are the task's start
    assert box.exec("cat added.txt; echo $SWERVE_PROBE").output == "bug\nactivated\n"
    failing = dataclasses.replace(task, setup=("echo cannot activate; exit 3",))
    with pytest.raises(InfraError) as caught:
        make_box().start(failing)
    assert "run the setup of textkit-001" in str(caught.value) and "cannot activate" in str(caught.value)
