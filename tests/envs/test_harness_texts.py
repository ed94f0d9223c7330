"""The harness's fixed texts come from the pinned package itself and are what it sends."""
import platform

import jinja2
import pytest

from configs.schema import HarnessConfig
from envs.harness_texts import harness_texts, literal_parts
from envs.harnesses import mini_swe_agent_home


def test_literal_parts_are_what_every_rendering_holds():
    template = "Solve: {{ task }}\n{% if big %}Output too long.{% else %}All of it:{% endif %}\n{{ out | tojson }}\n}"
    parts = literal_parts(template)
    assert parts == ["Solve: ", "Output too long.", "All of it:", "\n}"]  # whitespace-only pieces are left out
    rendered = jinja2.Template(template).render(task="fix `mean`", big=False, out="1 passed")
    assert all(part in rendered for part in parts if part != "Output too long.")


@pytest.mark.parametrize("config", ["default", "text"])
def test_mini_swe_agent_s_texts_are_its_package_s(config):
    texts = harness_texts(HarnessConfig(mini_swe_agent_config=config))
    assert "Please solve this issue: " in texts.texts
    package_yaml = "mini.yaml" if config == "default" else "mini_textbased.yaml"
    (path,) = mini_swe_agent_home().glob(f"lib/python*/site-packages/minisweagent/config/{package_yaml}")
    source = path.read_text(encoding="utf-8")
    # Every line of every text is in the package's YAML (indented there as a block scalar).
    assert all(line.strip() in source for text in texts.texts for line in text.splitlines())
    if config == "default":
        (tool,) = texts.tools
        assert tool["function"]["name"] == "bash" and tool["function"]["parameters"]["required"] == ["command"]
    else:
        assert texts.tools == () and any("mswea_bash_command" in text for text in texts.texts)
    # The instance template as mini-swe-agent renders it holds its literal parts in order.
    import yaml
    instance = yaml.safe_load(source)["agent"]["instance_template"]
    uname = platform.uname()
    rendered = jinja2.Template(instance, undefined=jinja2.StrictUndefined).render(
        task="T", system=uname.system, release=uname.release, version=uname.version, machine=uname.machine)
    position = 0
    for part in literal_parts(instance):
        if part in rendered[position:]:
            position = rendered.index(part, position) + len(part)
    assert position > len(rendered) * 0.9


def test_tool_agent_s_texts_are_its_module_s():
    from envs.harness_agents import tool_agent

    texts = harness_texts(HarnessConfig(name="tool-agent"))
    assert tool_agent.SYSTEM_PROMPT in texts.texts
    assert [tool["function"]["name"] for tool in texts.tools] == ["run", "finish"]


def test_a_command_harness_brings_no_texts():
    assert harness_texts(HarnessConfig(name="command", command="python3 agent.py")).texts == ()
