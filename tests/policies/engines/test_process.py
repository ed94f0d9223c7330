"""Engine backends, their server command lines, and the server's flags defaulting to EngineConfig."""
import time
import dataclasses
import typing

import pytest

from configs.schema import EngineBackend, EngineConfig
from configs.schema.engine import SERVER_BACKENDS
from policies.server.options import ServerConfig, engine_server_config, parse_args
from policies.engines.process import SERVER_COMMANDS, server_command


def test_every_engine_backend_but_the_in_actor_sim_has_a_server_command():
    assert set(SERVER_COMMANDS) | {"sim"} == set(typing.get_args(EngineBackend))
    assert tuple(SERVER_COMMANDS) == SERVER_BACKENDS  # what process.py checks when imported
    for backend in SERVER_COMMANDS:
        cmd = server_command(EngineConfig(backend=backend, server_args=["--log-level", "info"]), "/model", 1234)
        assert cmd[cmd.index("--port") + 1] == "1234" and cmd[-2:] == ["--log-level", "info"]
    with pytest.raises(ValueError, match="has no server; allowed: cpu, sglang"):
        server_command(EngineConfig(backend="sim"), "/model", 1234)


def test_the_cpu_command_line_parses_back_to_the_engines_settings():
    engine = EngineConfig(max_batch_size=3, max_context_tokens=512, torch_threads=2, prefix_cache_tokens=99)
    cmd = server_command(engine, "/model", 1234)
    parsed, log_level = parse_args(cmd[cmd.index("--model-path"):])
    assert parsed == engine_server_config("/model", engine, port=1234) and log_level == "warning"


def test_server_defaults_are_the_engine_defaults():
    engine, server = EngineConfig(), ServerConfig(model_path="/model")
    shared = {f.name for f in dataclasses.fields(ServerConfig)} & {f.name for f in dataclasses.fields(EngineConfig)}
    assert shared == {"max_batch_size", "max_context_tokens", "torch_threads", "prefix_cache_tokens",
                      "request_log_level"}
    assert {name: getattr(server, name) for name in shared} == {name: getattr(engine, name) for name in shared}
    assert parse_args(["--model-path", "/model"])[0] == server


def test_a_stopped_server_process_is_seen_as_stopped(tmp_path):
    import os
    import signal

    from policies.engines.process import ServerProcess

    server = ServerProcess(["sleep", "30"], str(tmp_path / "log"))
    try:
        assert server.alive() and not server.stopped()
        os.kill(server.proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while not server.stopped() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.stopped() and server.alive()  # alive, yet it will never answer
        os.kill(server.proc.pid, signal.SIGCONT)
        assert not server.stopped()
    finally:
        server.kill(grace_s=1.0)
    assert not server.alive()


def test_an_sglang_server_must_see_exactly_its_tp_size_gpus():
    from policies.engines.process import server_env

    cfg = EngineConfig(backend="sglang", tp_size=2, torch_threads=3)
    env = server_env(cfg, {"CUDA_VISIBLE_DEVICES": "4,5", "PATH": "/bin"})
    assert env["CUDA_VISIBLE_DEVICES"] == "4,5" and env["OMP_NUM_THREADS"] == "3" and env["PATH"] == "/bin"
    for view in ({}, {"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}):
        with pytest.raises(RuntimeError, match="engine.tp_size=2"):
            server_env(cfg, view)
    assert "CUDA_VISIBLE_DEVICES" not in server_env(EngineConfig(backend="cpu"), {})  # a CPU server needs none


def test_priority_scheduling_flags_follow_engine_priority():
    for backend in ("cpu", "sglang"):
        age = server_command(EngineConfig(backend=backend, priority="age", priority_preemption_threshold=7), "/m", 1)
        at = age.index("--enable-priority-scheduling")
        assert age[age.index("--priority-scheduling-preemption-threshold") + 1] == "7" and at > 0
        assert "--enable-priority-scheduling" not in server_command(EngineConfig(backend=backend, priority="fifo"),
                                                                    "/m", 1)
