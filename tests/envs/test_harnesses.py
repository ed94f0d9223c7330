"""The pinned mini-swe-agent runs headless from harness_command's launch against a scripted
OpenAI-compatible server on loopback: its own system prompt, its tool calls (default) or text
actions (text), its submit command ending the run, its step limit; and it imports inside a jail
that binds only the launch's files."""
import asyncio
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from configs.schema import HarnessConfig, SandboxConfig
from envs import harnesses
from envs.harnesses import SUBMIT_SENTINEL, HarnessMissing, harness_command, mini_swe_agent_home
from envs.sandboxes.local_sandbox import LocalSandbox

# A run is one interpreter start (litellm's import dominates) and two loopback calls; the bound is
# loose because the test machine's cores are shared.
RUN_BOUND_S = 120.0
TASK = "Make a file called made.txt holding hi."


class ScriptedServer:
    """/sessions/s1/v1/chat/completions answering from a script of assistant messages (the last
    one repeats); every request body is kept."""

    def __init__(self, replies: list[dict]):
        self.replies, self.requests = replies, []
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        assert self._started.wait(10), "the scripted server did not start"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/sessions/s1/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._started.set()
        self._loop.run_forever()

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        message = self.replies[min(len(self.requests), len(self.replies) - 1)]
        self.requests.append(body)
        return web.json_response({
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/sessions/s1/v1"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def _bash_call(call_id: str, arguments: str) -> dict:
    return {"role": "assistant", "content": "Doing it.",
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}]}


def _text_action(command: str) -> dict:
    return {"role": "assistant", "content": f"THOUGHT: next step.\n\n```mswea_bash_command\n{command}\n```"}


def _own_system_prompt(config_file: str) -> str:
    """The system prompt in the installed package's own config file, as it sends it: rendered by
    jinja, which drops the template's final newline (it holds no variables)."""
    (path,) = mini_swe_agent_home().glob(f"lib/python*/site-packages/minisweagent/config/{config_file}")
    template = yaml.safe_load(path.read_text())["agent"]["system_template"]
    assert "{" not in template
    return template.removesuffix("\n")


def _run(launch, workspace: Path, server: ScriptedServer, tmp_path: Path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8", **launch.env,
           "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test"}
    started_s = time.monotonic()
    process = subprocess.Popen(["bash", "-c", launch.command], cwd=workspace, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=RUN_BOUND_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode, output, time.monotonic() - started_s


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def task_file(tmp_path):
    path = tmp_path / "task.md"
    path.write_text(TASK)
    return str(path)


def test_missing_install_names_the_make_target(tmp_path, monkeypatch):
    monkeypatch.setenv(harnesses.ENV_VAR, str(tmp_path))
    with pytest.raises(HarnessMissing, match="make harness"):
        harness_command(HarnessConfig(), task_file="/tmp/t.md", workdir=".")


def test_command_harness_is_its_command_and_files(tmp_path):
    tool = tmp_path / "agent.py"
    tool.write_text("print('hi')\n")
    launch = harness_command(HarnessConfig(name="command", command="python3 agent.py", files=[str(tool)]),
                             task_file="/tmp/t.md", workdir=".")
    assert (launch.command, launch.files, launch.env) == ("python3 agent.py", [str(tool)],
                                                          {"SWERVE_TASK_FILE": "/tmp/t.md"})
    with pytest.raises(ValueError, match="env.harness.command"):
        harness_command(HarnessConfig(name="command"), task_file="/tmp/t.md", workdir=".")
    with pytest.raises(ValueError, match="env.harness.files"):
        harness_command(HarnessConfig(name="command", command="x", files=[str(tmp_path / "gone")]),
                        task_file="/tmp/t.md", workdir=".")


def test_a_request_cap_of_zero_is_refused():
    with pytest.raises(ValueError, match="max_requests"):
        harness_command(HarnessConfig(max_requests=0), task_file="/tmp/t.md", workdir=".")


@pytest.mark.slow
def test_default_config_runs_tool_calls_until_submit(workspace, task_file, tmp_path):
    # Compact arguments: the harness must send them back exactly as the reply gave them.
    server = ScriptedServer([_bash_call("call_1", '{"command":"echo hi > made.txt"}'),
                             _bash_call("call_2", json.dumps({"command": f"echo {SUBMIT_SENTINEL}"}))])
    try:
        launch = harness_command(HarnessConfig(), task_file=task_file, workdir=str(workspace), command_timeout_s=20)
        code, output, elapsed_s = _run(launch, workspace, server, tmp_path)
    finally:
        server.close()
    assert code == 0 and elapsed_s < RUN_BOUND_S, output[-3000:]
    assert sorted(os.listdir(workspace)) == ["made.txt"] and (workspace / "made.txt").read_text() == "hi\n"
    first, second = server.requests  # the submit ended it: no third call
    assert [tool["function"]["name"] for tool in first["tools"]] == ["bash"]
    assert first["messages"][0] == {"role": "system", "content": _own_system_prompt("mini.yaml")}
    assert first["messages"][1]["role"] == "user" and TASK in first["messages"][1]["content"]
    assert second["messages"][:2] == first["messages"]
    echoed, result = second["messages"][2:]
    assert echoed["tool_calls"] == [{"id": "call_1", "type": "function",
                                     "function": {"name": "bash", "arguments": '{"command":"echo hi > made.txt"}'}}]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_1" and '"returncode": 0' in result["content"]


@pytest.mark.slow
def test_text_config_runs_text_actions_until_submit(workspace, task_file, tmp_path):
    server = ScriptedServer([_text_action("echo hi > made.txt"), _text_action(f"echo {SUBMIT_SENTINEL}")])
    try:
        launch = harness_command(HarnessConfig(mini_swe_agent_config="text"), task_file=task_file,
                                 workdir=str(workspace))
        code, output, elapsed_s = _run(launch, workspace, server, tmp_path)
    finally:
        server.close()
    assert code == 0 and elapsed_s < RUN_BOUND_S, output[-3000:]
    assert sorted(os.listdir(workspace)) == ["made.txt"]
    first, second = server.requests
    assert "tools" not in first and first["messages"][0] == {"role": "system",
                                                             "content": _own_system_prompt("mini_textbased.yaml")}
    assert second["messages"][2] == {"role": "assistant", "content": _text_action("echo hi > made.txt")["content"]}
    assert second["messages"][3]["role"] == "user" and "<returncode>0</returncode>" in second["messages"][3]["content"]


@pytest.mark.slow
def test_step_limit_stops_it_and_a_reply_without_action_is_not_echoed(workspace, task_file, tmp_path):
    server = ScriptedServer([{"role": "assistant", "content": "I will think first."}])
    try:
        launch = harness_command(HarnessConfig(max_requests=2), task_file=task_file, workdir=str(workspace))
        code, output, _ = _run(launch, workspace, server, tmp_path)
    finally:
        server.close()
    assert code == 0, output[-3000:]
    first, second = server.requests  # its step limit: max_requests calls, then a clean exit
    # mini-swe-agent drops a reply it could not parse and sends only its own format error: the
    # history does not extend the previous request plus reply (the gateway starts a new segment).
    assert second["messages"][:2] == first["messages"] and len(second["messages"]) == 3
    assert second["messages"][2]["role"] == "user" and "tool call" in second["messages"][2]["content"].lower()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_it_imports_in_a_jail_that_binds_only_the_launch_files(tmp_path, task_by_id):
    launch = harness_command(HarnessConfig(), task_file="/tmp/t.md", workdir=".")
    box = LocalSandbox(SandboxConfig(isolation="bwrap", workdir_root=str(tmp_path), ro_binds=launch.files))
    try:
        box.start(task_by_id["textkit-001"])
        before = sorted(os.listdir(box.workspace))
        exports = "".join(f"export {key}='{value}'; " for key, value in launch.env.items())
        mini = launch.command.split()[0]
        result = box.exec(f"{exports}{Path(mini).parent}/python -c 'import minisweagent.run.mini' && echo imported",
                          timeout_s=RUN_BOUND_S)
        assert result.exit_code == 0 and "imported" in result.output, result.output[-3000:]
        assert sorted(os.listdir(box.workspace)) == before  # its files went to /tmp
    finally:
        box.close()
