"""The fixed texts an agent harness sends the policy: what the tokenizer should know as words.

An unmodified harness wraps every task in its own prompt (system and instance templates), wraps
every command's output in its observation wording, answers a malformed reply with its format-error
text and offers its tool schemas. Those texts are the same in every request, so the offline
tokenizer learns them as it learns the tasks' texts (policies.corpus.HarnessVocabulary, handed
across by actors/stages/policy_setup.py): a different harness, or another configuration of the same
one, gives other texts and so another tokenizer (the cache key holds them).

mini-swe-agent's texts are read from the pinned package `make harness` installed (its config YAML and
its bash tool schema), never copied here, so they are exactly what the harness sends. Only the
templates' literal parts are taken (jinja's TemplateData): the variables (the task, the output, the
platform) differ per request. tool-agent's are its module's own constants (its prompt, its nudge,
its tools).
"""
from __future__ import annotations

import ast
import glob
import os
from dataclasses import dataclass
from typing import List, Tuple

import jinja2
import yaml
from jinja2 import nodes

from configs.schema import HarnessConfig
from envs.harness_agents import tool_agent
from envs.harnesses import MINI_CONFIGS, mini_swe_agent_home

# The templates of a mini-swe-agent config whose literal text reaches the policy.
_TEMPLATE_KEYS = (("agent", "system_template"), ("agent", "instance_template"),
                  ("model", "observation_template"), ("model", "format_error_template"))
# The tool the tool-calling configuration offers, as a literal in this module of the package.
_TOOL_MODULE = os.path.join("models", "utils", "actions_toolcall.py")
_TOOL_NAME = "BASH_TOOL"


@dataclass(frozen=True)
class HarnessTexts:
    # The literal parts of the harness's templates, in the order the package holds them.
    texts: Tuple[str, ...]
    # The tool schemas the harness offers in each request (OpenAI `tools` entries).
    tools: Tuple[dict, ...]


def harness_texts(cfg: HarnessConfig) -> HarnessTexts:
    """The fixed texts of the harness env.harness names. A `command` harness is a program swerve
    does not know: it gets none (the tokenizer is the tasks' alone)."""
    if cfg.name == "tool-agent":
        return HarnessTexts(texts=(tool_agent.SYSTEM_PROMPT, tool_agent.NO_TOOL_CALL), tools=tuple(tool_agent.TOOLS))
    if cfg.name != "mini-swe-agent":
        return HarnessTexts(texts=(), tools=())
    package = _package_dir()
    config_file, model_class = MINI_CONFIGS[cfg.mini_swe_agent_config]
    config_path = os.path.join(package, "config", config_file)
    with open(config_path, encoding="utf-8") as f:
        config = yaml.safe_load(f)
    texts: List[str] = []
    for section, key in _TEMPLATE_KEYS:
        template = config.get(section, {}).get(key)
        if not isinstance(template, str):
            raise ValueError(f"{config_path}: no {section}.{key} template; the pinned mini-swe-agent changed "
                             "its config layout: rerun `make harness`")
        texts += literal_parts(template)
    # The text-based configuration names a model class of its own and offers no tools.
    tools = () if model_class is not None else (_bash_tool(os.path.join(package, _TOOL_MODULE)),)
    return HarnessTexts(texts=tuple(texts), tools=tools)


def literal_parts(template: str) -> List[str]:
    """The text a jinja template always emits, piece by piece between its variables and tags."""
    parsed = jinja2.Environment().parse(template)
    return [node.data for node in parsed.find_all(nodes.TemplateData) if node.data.strip()]


def _package_dir() -> str:
    found = sorted(glob.glob(str(mini_swe_agent_home() / "lib" / "python3*" / "site-packages" / "minisweagent")))
    if not found:
        raise FileNotFoundError(f"no minisweagent package under {mini_swe_agent_home()}/lib: rerun `make harness`")
    return found[-1]


def _bash_tool(path: str) -> dict:
    """The package's tool schema, read as the literal it is (its module is not imported: it needs
    the harness's own venv)."""
    with open(path, encoding="utf-8") as f:
        module = ast.parse(f.read(), filename=path)
    for statement in module.body:
        if isinstance(statement, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == _TOOL_NAME for target in statement.targets):
            return ast.literal_eval(statement.value)
    raise ValueError(f"{path} defines no {_TOOL_NAME}; the pinned mini-swe-agent changed: rerun `make harness`")
