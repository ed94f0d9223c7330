"""How swerve/Harness-v0 starts an agent harness inside a task's sandbox.

`harness_command(cfg, ...)` turns env.harness into a HarnessLaunch: the shell command run in the
workspace, the host paths bound read-only into the sandbox at the same paths, and the extra
environment. The env adds OPENAI_BASE_URL / OPENAI_API_KEY (the trajectory's gateway session).

mini-swe-agent (pinned) lives in its own venv outside the checkout, made by `make harness` from the
interpreter swerve's venv was made from; `mini_swe_agent_home()` finds it ($SWERVE_MINI_SWE_AGENT_DIR,
else ~/.cache/swerve/harness/mini-swe-agent-<version>, as the Makefile installs it). It runs as its
users run it (`mini`, its own configs and system prompt), headless: yolo, no exit confirmation,
stdin closed, every file it writes under /tmp, never in the workspace (which is graded).

tool-agent is swerve's own small harness (envs/harness_agents/tool_agent.py, standard library
only): the launch binds that one file read-only at its own path and runs it with the sandbox's
python3, so a config names the harness, never a path on this machine.
"""
from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from configs.schema import HarnessConfig

MINI_SWE_AGENT_VERSION = "2.4.6"
ENV_VAR = "SWERVE_MINI_SWE_AGENT_DIR"
DEFAULT_DIR = os.path.join("~", ".cache", "swerve", "harness", f"mini-swe-agent-{MINI_SWE_AGENT_VERSION}")
STAMP = ".installed"
# What mini-swe-agent's submit command prints first; its environment ends the run on it.
SUBMIT_SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
# What the harness names the model (the gateway serves its session's policy whatever the name);
# litellm's "openai/" prefix picks its OpenAI-compatible client, which reads OPENAI_BASE_URL.
MODEL_NAME = "swerve-policy"
# Where the harness keeps its own files inside the sandbox (trajectory, global config, history).
HARNESS_TMP = "/tmp/swerve-harness"
TRAJECTORY_PATH = f"{HARNESS_TMP}/mini-swe-agent.traj.json"
# env.harness.mini_swe_agent_config -> the package's own config file, and the model class that
# reads replies in its format: the text-based YAML names no class of its own.
MINI_CONFIGS = {"default": ("mini.yaml", None), "text": ("mini_textbased.yaml", "litellm_textbased")}
_SYSTEM_PREFIXES = ("/usr/", "/bin/", "/sbin/", "/lib", "/etc/")
TOOL_AGENT = Path(__file__).resolve().parent / "harness_agents" / "tool_agent.py"
HARNESS_NAMES = ("mini-swe-agent", "tool-agent", "command")


class HarnessMissing(RuntimeError):
    """The harness named by env.harness is not installed where swerve looks for it."""


@dataclass(frozen=True)
class HarnessLaunch:
    # Shell command run in the task's workspace inside the sandbox.
    command: str
    # Host files or folders bound read-only into the sandbox at the same paths.
    files: List[str] = field(default_factory=list)
    # Extra environment (the env adds OPENAI_BASE_URL and OPENAI_API_KEY itself).
    env: Dict[str, str] = field(default_factory=dict)


def mini_swe_agent_home() -> Path:
    """The venv holding mini-swe-agent: $SWERVE_MINI_SWE_AGENT_DIR, else the Makefile's default."""
    home = Path(os.path.expanduser(os.environ.get(ENV_VAR) or DEFAULT_DIR))
    if not (home / STAMP).is_file() or not (home / "bin" / "mini").is_file():
        raise HarnessMissing(f"mini-swe-agent {MINI_SWE_AGENT_VERSION} is not installed at {home} (no {STAMP} "
                             f"or bin/mini): run `make harness` (or set {ENV_VAR})")
    return home


def _interpreter_prefix(venv: Path) -> Path:
    """The installation the venv's python links to (pyvenv.cfg `home` is its bin folder)."""
    cfg_path = venv / "pyvenv.cfg"
    for line in cfg_path.read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            return Path(value.strip()).parent
    raise HarnessMissing(f"{cfg_path} names no interpreter (no `home =` line): rerun `make harness`")


def _host_files(paths: List[str]) -> List[str]:
    missing = [path for path in paths if not os.path.exists(path)]
    if missing:
        raise ValueError(f"env.harness.files: no such host path: {', '.join(missing)}")
    return list(paths)


def harness_command(cfg: HarnessConfig, *, task_file: str, workdir: str,
                    command_timeout_s: Optional[float] = None) -> HarnessLaunch:
    """The launch of env.harness for one episode. task_file holds the task statement (a path inside
    the sandbox); workdir is the workspace there (the command also starts in it).
    command_timeout_s bounds each command mini-swe-agent or tool-agent runs for the agent (pass
    sandbox.command_timeout_s); None keeps the harness's own limit (mini-swe-agent's 30 s)."""
    env = {"SWERVE_TASK_FILE": task_file}
    if cfg.name == "command":
        if not cfg.command.strip():
            raise ValueError("env.harness.name=command needs env.harness.command (the program to run)")
        return HarnessLaunch(command=cfg.command, files=_host_files(cfg.files), env=env)
    if cfg.name not in HARNESS_NAMES:
        raise ValueError(f"env.harness.name={cfg.name!r}; allowed: {', '.join(HARNESS_NAMES)}")
    if cfg.max_requests < 1:
        raise ValueError(f"env.harness.max_requests={cfg.max_requests}: must be at least 1 (it is the "
                         "harness's own step limit, and mini-swe-agent reads 0 as none)")
    if command_timeout_s is not None and command_timeout_s <= 0:
        raise ValueError(f"command_timeout_s={command_timeout_s}: must be positive")
    if cfg.name == "tool-agent":
        return _tool_agent(cfg, env, command_timeout_s)
    if cfg.mini_swe_agent_config not in MINI_CONFIGS:
        raise ValueError(f"env.harness.mini_swe_agent_config={cfg.mini_swe_agent_config!r}; "
                         f"allowed: {', '.join(MINI_CONFIGS)}")
    home = mini_swe_agent_home()
    config_file, model_class = MINI_CONFIGS[cfg.mini_swe_agent_config]
    # Later -c specs override earlier ones key by key (its recursive merge), so its own config file,
    # system prompt and templates stay; only limits, cost and paths change.
    specs = [
        config_file,
        f"agent.step_limit={cfg.max_requests}",
        "agent.cost_limit=0",
        # An unknown model has no price in litellm's map: mini-swe-agent would stop on it.
        "model.cost_tracking=ignore_errors",
        f"model.model_kwargs.timeout={cfg.step_timeout_s}",
        f"environment.cwd={workdir}",
    ]
    if command_timeout_s is not None:
        # Whole seconds (its field is an int), rounded up so a command gets at least its limit.
        specs.append(f"environment.timeout={math.ceil(command_timeout_s)}")
    argv = [str(home / "bin" / "mini"), "--yolo", "--exit-immediately", "--model", f"openai/{MODEL_NAME}",
            "--output", TRAJECTORY_PATH]
    if model_class is not None:
        argv += ["--model-class", model_class]
    for spec in specs:
        argv += ["--config", spec]
    # The statement is read in the sandbox; --task=... keeps one starting with "-" a value.
    command = f'{shlex.join(argv)} --task="$(cat "$SWERVE_TASK_FILE")" < /dev/null'
    env.update({
        # Its first run otherwise asks for a model and key on the terminal.
        "MSWEA_CONFIGURED": "true",
        "MSWEA_GLOBAL_CONFIG_DIR": f"{HARNESS_TMP}/config",
        # One try per call: the gateway is local and handles weight updates itself, so a failed call
        # is final; its default (10 tries, backing off up to 60 s) would outlast the episode.
        "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",
        # litellm fetches its price map from the internet at import unless told to use its own copy.
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONUNBUFFERED": "1",
    })
    files = [str(home)]
    prefix = _interpreter_prefix(home)
    if not str(prefix).startswith(_SYSTEM_PREFIXES):
        files.append(str(prefix))
    return HarnessLaunch(command=command, files=files + _host_files(cfg.files), env=env)


def _tool_agent(cfg: HarnessConfig, env: Dict[str, str], command_timeout_s: Optional[float]) -> HarnessLaunch:
    """swerve's own harness: its step limit env.harness.max_requests, its model-call limit
    env.harness.step_timeout_s, each command's limit command_timeout_s (else its own default)."""
    argv = ["python3", "-I", str(TOOL_AGENT), "--max-steps", str(cfg.max_requests),
            "--request-timeout-s", f"{cfg.step_timeout_s:g}"]
    if command_timeout_s is not None:
        argv += ["--command-timeout-s", f"{command_timeout_s:g}"]
    return HarnessLaunch(command=shlex.join(argv), files=[str(TOOL_AGENT)] + _host_files(cfg.files),
                         env={**env, "PYTHONUNBUFFERED": "1"})
