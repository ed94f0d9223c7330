"""Secrets never reach run files, eval outputs, logs, prints or metric tags; our servers bind loopback."""
import collections
import dataclasses
import json
import logging
import socket
import subprocess
import sys
import time

import pytest

from actors.report import redact
from actors.report.redact import REDACTED, is_secret_name, redact_text
from actors.report.run_dir import RunDir
from configs import Config, load_config

# Shaped like no known key format, so only the environment can tell that it is a secret.
ENV_SECRET = "zq8Vw3Lp0xR7tYk2"
KEY_SHAPED = {
    "openai": "sk-proj-abcdefghijklmnop0123456789",
    "anthropic": "sk-ant-api03-abcdefghijklmnop0123",
    "e2b": "e2b_0123456789abcdef0123456789abcdef",
    "hf": "hf_ABCDEFGHIJKLMNOPQRSTUVWXYZabcd",
    "github": "ghp_0123456789ABCDEFGHIJabcdefghij",
    "aws": "AKIAIOSFODNN7EXAMPLE",
}


@pytest.fixture
def env_secret(monkeypatch):
    monkeypatch.setenv("SWERVE_TEST_API_KEY", ENV_SECRET)
    return ENV_SECRET


@pytest.mark.parametrize("name", [
    "E2B_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "RAY_AUTH_TOKEN",
    "GITHUB_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "DB_PASSWORD", "api_key",
    "apikey", "client_secret", "GOOGLE_APPLICATION_CREDENTIALS", "wandb-api-key"])
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", [
    "max_tokens_per_turn", "max_context_tokens", "token_ids", "tokenizer", "generated_tokens", "RAY_AUTH_TOKEN_PATH",
    "AWS_SHARED_CREDENTIALS_FILE", "HOME", "PATH", "RAY_AUTH_MODE", "author", "keyboard"])
def test_ordinary_names(name):
    assert not is_secret_name(name)


def test_environment_secrets_and_key_shapes_are_blanked(env_secret, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "short")  # too short to be blanked everywhere it appears
    text = " | ".join([f"key={env_secret}", *KEY_SHAPED.values(), "Authorization: Bearer abc.def-ghij",
                       "https://user:hunter2hunter2@example.com/repo.git",
                       "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----"])
    clean = redact_text(text)
    for secret in [env_secret, *KEY_SHAPED.values(), "abc.def-ghij", "hunter2hunter2", "b3BlbnNzaC1rZXk"]:
        assert secret not in clean
    assert clean.count(REDACTED) == 10
    assert "Authorization: Bearer [REDACTED]" in clean and "https://user:[REDACTED]@example.com" in clean
    ordinary = "short tokens: task-abcdefghijklmnopqrstuvwxyz, the basic functionality, Token versions, sk-1"
    assert redact_text(ordinary) == ordinary


def test_nested_objects_blank_secret_named_keys_and_values(env_secret):
    @dataclasses.dataclass
    class Section:
        api_key: str = "abc"  # short, but its name says secret
        max_tokens: int = 7
        args: tuple = ("--flag", env_secret)

    Pair = collections.namedtuple("Pair", "left right")
    obj = {"token_ids": [1, 2], "password": "pw", "nested": [{"msg": f"got {env_secret}"}], "section": Section(),
           "pair": Pair(1, env_secret)}
    clean = redact.redact(obj)
    assert clean["pair"] == Pair(1, REDACTED)
    assert clean["token_ids"] == [1, 2] and clean["password"] == REDACTED
    assert clean["nested"] == [{"msg": f"got {REDACTED}"}]
    assert clean["section"] == Section(api_key=REDACTED, max_tokens=7, args=("--flag", REDACTED))
    assert obj["password"] == "pw" and obj["section"].api_key == "abc"  # the input is left as it was


def test_ray_auth_token_file_is_a_secret(tmp_path, monkeypatch):
    token_file = tmp_path / "auth_token"
    token_file.write_text("f00dfeedcafe0123456789\n")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token_file))
    assert redact_text("token f00dfeedcafe0123456789 used") == f"token {REDACTED} used"


def test_run_dir_files_hold_no_secret(tmp_path, env_secret):
    cfg = load_config(None, [f"run.dir={tmp_path}", "run.name=secrets"])
    cfg.engine.server_args = ["--api-key", env_secret]
    cfg.env.kwargs = {"api_key": "abc", "endpoint_token": KEY_SHAPED["hf"]}
    run_dir = RunDir(cfg)
    observation = f"$ env\nSWERVE_TEST_API_KEY={env_secret}\nOPENAI_API_KEY={KEY_SHAPED['openai']}\n"
    run_dir.write_trajectories(1, [{"task_id": "t", "messages": [{"role": "user", "content": observation}]}])
    run_dir.write_metrics({**{name: 0 for name in ("step", *_metric_names())}, "infra_error_by_source": {}})
    run_dir.write_accounting({"error": f"e2b: 401 for key {KEY_SHAPED['e2b']}", "api_key": "abc"})
    run_dir.keep_rows_through(1)
    run_dir.record_event("resume", step=1, note=f"engine said {KEY_SHAPED['openai']}")
    texts = {path.name: path.read_text() for path in run_dir.path.rglob("*") if path.is_file()}
    assert set(texts) == {"config.yaml", "metrics.jsonl", "accounting.json", "events.jsonl", "step_000001.jsonl"}
    assert [e["event"] for e in run_dir.events()] == ["resume"]
    for name, text in texts.items():
        for secret in (env_secret, *KEY_SHAPED.values()):
            assert secret not in text, f"{secret} in {name}"
    assert "api_key: '[REDACTED]'" in texts["config.yaml"] and "max_tokens_per_turn:" in texts["config.yaml"]
    assert "--api-key" in texts["config.yaml"] and "name: secrets" in texts["config.yaml"]
    message = json.loads(texts["step_000001.jsonl"])["messages"][0]["content"]
    assert message == f"$ env\nSWERVE_TEST_API_KEY={REDACTED}\nOPENAI_API_KEY={REDACTED}\n"
    assert json.loads(texts["accounting.json"])["api_key"] == REDACTED


def _metric_names():
    from actors.report.run_dir import METRIC_NAMES

    return [name for name in METRIC_NAMES if name != "infra_error_by_source"]


def test_eval_outputs_hold_no_secret(tmp_path, env_secret):
    from actors.stages import evaluate
    from actors.episodes.trajectory import Trajectory
    from envs.tasks.loaders import load_tasks

    task = load_tasks(split="eval")[0]
    traj = Trajectory(group_id=0, member=0, attempt=0, task_id=task.id, admitted_version=0, outcome="resolved",
                      model_patch=f"+API_KEY = '{env_secret}'\n")
    rows = evaluate.predictions([task], [traj], "model")
    evaluate.write_jsonl(tmp_path / "predictions.jsonl", rows)
    evaluate.write_json(tmp_path / "eval.json", {"per_task": [{"error": KEY_SHAPED["anthropic"]}]})
    for name in ("predictions.jsonl", "eval.json"):
        text = (tmp_path / name).read_text()
        assert env_secret not in text and KEY_SHAPED["anthropic"] not in text and REDACTED in text


@pytest.fixture
def uninstalled(monkeypatch):
    """install() may be called in the test: the record factory, stdout and stderr come back after it."""
    monkeypatch.setattr(redact, "_factory_installed", False)
    factory = logging.getLogRecordFactory()
    yield
    logging.setLogRecordFactory(factory)


def test_log_records_and_prints_are_redacted(env_secret, caplog, capsys, uninstalled, monkeypatch):
    # In the test body: pytest puts its own capture streams in place when the test starts.
    monkeypatch.setattr(sys, "stdout", sys.stdout)
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    redact.install()
    redact.install()  # idempotent: one wrapper, one factory
    log = logging.getLogger("envs.some_module")
    with caplog.at_level(logging.INFO):
        log.warning("command output: %s", f"E2B_API_KEY={env_secret}")
        try:
            raise RuntimeError(f"auth failed for {KEY_SHAPED['github']}")
        except RuntimeError:
            log.exception("sandbox start failed")
        log.info("plain %d%%", 5)
    assert env_secret not in caplog.text and KEY_SHAPED["github"] not in caplog.text
    assert f"command output: E2B_API_KEY={REDACTED}" in caplog.text and "plain 5%" in caplog.text
    assert f"RuntimeError: auth failed for {REDACTED}" in caplog.text
    print(f"[swerve] status {env_secret}", flush=True)
    print(KEY_SHAPED["aws"], file=sys.stderr)
    out, err = capsys.readouterr()
    assert out == f"[swerve] status {REDACTED}\n" and err == f"{REDACTED}\n"
    assert not isinstance(sys.stdout.wrapped, redact.RedactingStream)


def test_metric_tags_are_redacted(env_secret):
    from actors.report.metrics_export import MetricsExporter

    assert MetricsExporter(f"run-{env_secret}").tags == {"run": f"run-{REDACTED}"}


def test_config_schema_has_no_secret_fields():
    """Keys come from the environment only; a config field for one would end up in config.yaml."""
    def walk(obj, prefix):
        for field in dataclasses.fields(obj):
            value = getattr(obj, field.name)
            yield f"{prefix}{field.name}"
            if dataclasses.is_dataclass(value):
                yield from walk(value, f"{prefix}{field.name}.")

    assert [name for name in walk(Config(), "") if is_secret_name(name.rsplit(".", 1)[-1])] == []


# ---- exposure: every server we start listens on loopback by default ----------------------------

def test_engine_servers_are_launched_on_loopback():
    from policies.engines.process import ENGINE_HOST, server_command
    from configs.schema import EngineConfig
    from policies.server.options import build_arg_parser

    assert ENGINE_HOST == "127.0.0.1"
    for backend in ("cpu", "sglang"):
        cmd = server_command(EngineConfig(backend=backend), "/model", 1234)
        assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert build_arg_parser().parse_args(["--model-path", "/model"]).host == "127.0.0.1"


def test_local_ray_and_its_dashboard_listen_on_loopback(monkeypatch):
    import ray

    from actors.fleet import launch

    calls = []
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    launch.init_ray(Config())
    launch.init_ray(load_config(None, ["ray.dashboard=false", "ray.dashboard_port=8300"]))
    on, off = calls
    assert on["_node_ip_address"] == "127.0.0.1" and on["dashboard_host"] == "127.0.0.1"
    assert on["include_dashboard"] is True and on["dashboard_port"] is None  # Ray's 8265 or the next free one
    assert off["include_dashboard"] is False and off["dashboard_port"] == 8300


def _listening_address(port: int) -> str:
    """The local address ("127.0.0.1", "0.0.0.0", ...) of the IPv4 socket listening on `port`."""
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                return socket.inet_ntoa(bytes.fromhex(address)[::-1])
    raise AssertionError(f"nothing listens on port {port}")


@pytest.mark.slow
def test_cpu_server_with_default_host_listens_on_loopback_only(model_path):
    cmd = [sys.executable, "-m", "policies.server", "--model-path", model_path, "--port", "0"]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        line = ""
        while "ready on" not in line and time.monotonic() < deadline and server.poll() is None:
            line = server.stdout.readline()
        assert "ready on http://127.0.0.1:" in line, line
        port = int(line.rsplit(":", 1)[1])
        assert _listening_address(port) == "127.0.0.1"
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        outside = _non_loopback_address()
        if outside is not None:
            with pytest.raises(OSError):
                socket.create_connection((outside, port), timeout=5).close()
    finally:
        server.terminate()
        server.wait(timeout=30)


def _non_loopback_address() -> str | None:
    """An IPv4 address of this host that is not loopback (the one a route to outside uses)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # UDP connect sends nothing; it only picks a route
        except OSError:
            return None  # no route out: no other interface to try
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_a_secret_split_across_tokens_is_blanked_and_the_pieces_stay_aligned(env_secret):
    pieces = ["export ", "KEY=", env_secret[:5], env_secret[5:11], env_secret[11:], " && ls", "\n"]
    out = redact.redact_pieces(pieces)
    assert len(out) == len(pieces) and env_secret not in "".join(out)
    assert out == ["export ", "KEY=", REDACTED, "", "", " && ls", "\n"]
    key = KEY_SHAPED["openai"]
    shaped = redact.redact_pieces(["curl -H 'Authorization: Bearer ", key[:9], key[9:], "' x"])
    assert shaped[1:3] == [REDACTED, ""] and key[9:] not in "".join(shaped)
    clean = ["no ", "secret ", "here"]
    assert redact.redact_pieces(clean) == clean
