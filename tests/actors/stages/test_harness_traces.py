"""The expert's reply to a harness's request is read from the tools the request offers, never from
the harness's name: mini-swe-agent's bash tool, tool-agent's run and finish, no tools (a text
format), and a harness whose tools it cannot drive (refused by name)."""
import json
from types import SimpleNamespace

import pytest

from actors.stages.harness_traces import expert_reply, harness_reply
from envs.harness_agents.tool_agent import TOOLS
from envs.harnesses import SUBMIT_SENTINEL

# mini-swe-agent's tool, in the shape it offers it.
BASH = [{"type": "function", "function": {
    "name": "bash", "description": "Execute a bash command",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]


def _offering(tools):
    return SimpleNamespace(tools=tools)


def _call(reply: str) -> dict:
    assert reply.startswith("<tool_call>\n") and reply.endswith("\n</tool_call>")
    return json.loads(reply.removeprefix("<tool_call>\n").removesuffix("\n</tool_call>"))


def test_a_command_goes_to_the_tool_that_takes_one():
    assert expert_reply("ls", _offering(BASH)) == harness_reply("ls", "default")
    assert _call(expert_reply("ls", _offering(TOOLS))) == {"name": "run", "arguments": {"command": "ls"}}


def test_submit_calls_a_tool_without_parameters_or_runs_the_submit_command():
    assert _call(expert_reply(None, _offering(TOOLS))) == {"name": "finish", "arguments": {}}
    assert _call(expert_reply(None, _offering(BASH))) == {"name": "bash",
                                                         "arguments": {"command": f"echo {SUBMIT_SENTINEL}"}}


def test_a_request_without_tools_gets_the_text_format():
    assert expert_reply("ls", _offering(None)) == harness_reply("ls", "text")
    assert expert_reply(None, _offering([])) == harness_reply(f"echo {SUBMIT_SENTINEL}", "text")


def test_tools_it_cannot_run_a_command_through_are_named():
    read = [{"type": "function", "function": {"name": "read_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}}}}]
    with pytest.raises(ValueError, match="`command` parameter; the harness offers read_file"):
        expert_reply("ls", _offering(read))
