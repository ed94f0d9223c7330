"""tool-agent, launched as env.harness.name=tool-agent launches it, against a scripted
OpenAI-compatible server on loopback: its own prompt and tools, commands run in its folder and
answered as tool messages, finish and its step limit ending it, a failed call ending it by name;
and it imports nothing but the standard library (the sandbox's python3 runs it)."""
import ast
import json
import sys

from configs.schema import HarnessConfig
from envs.harness_agents import tool_agent
from envs.harness_agents.tool_agent import NO_TOOL_CALL, SYSTEM_PROMPT, TOOLS
from envs.harnesses import TOOL_AGENT, harness_command
from tests.envs.test_harnesses import RUN_BOUND_S, TASK, ScriptedServer, _run, task_file, workspace  # noqa: F401


def _call(call_id: str, name: str, arguments) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def _launch(task_file: str, **fields):
    return harness_command(HarnessConfig(name="tool-agent", **fields), task_file=task_file, workdir=".",
                           command_timeout_s=20)


def test_it_runs_commands_as_tool_calls_until_finish(workspace, task_file, tmp_path):
    server = ScriptedServer([_call("c1", "run", {"command": "echo hi > made.txt; echo said"}),
                             _call("c2", "nope", {}), _call("c3", "run", {"cmd": "x"}),
                             _call("c4", "run", {"command": "exit 3"}), _call("c5", "finish", {})])
    try:
        code, output, elapsed_s = _run(_launch(task_file), workspace, server, tmp_path)
    finally:
        server.close()
    assert code == 0 and elapsed_s < RUN_BOUND_S and "finished" in output, output[-3000:]
    assert sorted(p.name for p in workspace.iterdir()) == ["made.txt"]
    assert (workspace / "made.txt").read_text() == "hi\n"
    assert len(server.requests) == 5  # finish ended it
    first, last = server.requests[0], server.requests[-1]
    assert first["tools"] == TOOLS and "max_tokens" not in first  # the run's own cap applies
    assert first["messages"] == [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    # Each request extends the one before with the reply as it came and the tool's answer.
    for before, after in zip(server.requests, server.requests[1:]):
        assert after["messages"][:len(before["messages"])] == before["messages"]
    answers = [m for m in last["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in answers] == ["c1", "c2", "c3", "c4"]
    assert answers[0]["content"] == "exit 0\nsaid\n"
    assert "no tool named 'nope'" in answers[1]["content"] and '{"command"' in answers[2]["content"]
    assert answers[3]["content"] == "exit 3\n"
    assert last["messages"][2] == _call("c1", "run", {"command": "echo hi > made.txt; echo said"})


def test_a_reply_without_a_tool_call_is_answered_and_the_step_limit_ends_it(workspace, task_file, tmp_path):
    server = ScriptedServer([{"role": "assistant", "content": "Let me think."}])
    try:
        code, output, _ = _run(_launch(task_file, max_requests=2), workspace, server, tmp_path)
    finally:
        server.close()
    assert code == 0 and "stopped after 2 model calls" in output, output[-3000:]
    first, second = server.requests
    assert second["messages"][2:] == [{"role": "assistant", "content": "Let me think."},
                                      {"role": "user", "content": NO_TOOL_CALL}]


def test_a_failed_model_call_ends_it_naming_the_status(workspace, task_file, tmp_path):
    server = ScriptedServer([_call("c1", "finish", {})])
    launch = _launch(task_file)
    try:
        # Another session's address: the server answers 404.
        code, output, _ = _run(launch, workspace, _Elsewhere(server), tmp_path)
    finally:
        server.close()
    assert code == 2 and "HTTP 404" in output and server.requests == []


class _Elsewhere:
    def __init__(self, server):
        self.base_url = server.base_url.replace("/sessions/s1/", "/sessions/s2/")


def test_a_command_is_cut_at_its_limit_and_a_flood_keeps_its_head_and_tail():
    timed = tool_agent.run("echo started; sleep 30 & sleep 30", 0.5)
    assert timed.startswith("exit 124 (timed out after 0.5 s)\nstarted")
    flood = tool_agent.run("printf 'HEAD'; head -c 100000 /dev/zero | tr '\\0' x; printf 'TAIL'", 5)
    assert flood.startswith("exit 0\nHEAD") and flood.endswith("TAIL") and "bytes cut" in flood
    assert len(flood) < tool_agent.MAX_OUTPUT_BYTES + 100


def test_the_launch_binds_the_packaged_agent_and_passes_the_limits(tmp_path):
    extra = tmp_path / "notes.txt"
    extra.write_text("x")
    launch = harness_command(HarnessConfig(name="tool-agent", max_requests=5, step_timeout_s=90, files=[str(extra)]),
                             task_file="/tmp/t.md", workdir=".", command_timeout_s=20)
    assert launch.files == [str(TOOL_AGENT), str(extra)] and TOOL_AGENT.is_file()
    assert launch.command == (f"python3 -I {TOOL_AGENT} --max-steps 5 --request-timeout-s 90 "
                              "--command-timeout-s 20")
    assert launch.env["SWERVE_TASK_FILE"] == "/tmp/t.md"


def test_it_imports_only_the_standard_library():
    tree = ast.parse(TOOL_AGENT.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported and imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
