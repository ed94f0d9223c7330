"""swerve/Harness-v0 with tool-agent (env.harness.name=tool-agent), end to end without Ray: the agent
runs in a real sandbox (a bubblewrap jail, and a docker container where an engine runs), its only
route the episode actor's real gateway; the scripted expert answers its requests by the tools they
offer (actors/stages/harness_traces.py), and the workspace it leaves is graded resolved."""
import random
import shutil
from types import SimpleNamespace

import pytest

from actors.episodes.episode_actor import EpisodeActor
from actors.episodes.gateway import GatewaySpec
from actors.episodes.trajectory import WorkItem
from actors.stages.harness_traces import ScriptedReplies, expert_reply, planned_steps
from configs.schema import EnvConfig, HarnessConfig, RolloutConfig, SandboxConfig
from envs.harness_agents.tool_agent import SYSTEM_PROMPT, TOOLS
from envs.make import env_sandbox
from envs.sandboxes.docker_sandbox import DockerSandbox
from envs.sandboxes.local_sandbox import LocalSandbox
from envs.tasks.loaders import load_tasks
from policies.chat.chat_tokenizer import load_chat_tokenizer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def task():
    return load_tasks("micro", "train")[0]


def play(sandbox_cfg: SandboxConfig, make_sandbox, tokenizer_path: str, task):
    env = EnvConfig(id="swerve/Harness-v0", harness=HarnessConfig(name="tool-agent", max_requests=8))
    sandbox_cfg = env_sandbox(env, sandbox_cfg)
    rollout = RolloutConfig(max_tokens_per_turn=96, max_total_tokens=4096, max_episode_seconds=150.0)
    actor = EpisodeActor(0, rollout, env, sandbox_cfg, tokenizer_path, None, None, make_sandbox(sandbox_cfg),
                         gateway=GatewaySpec(4096, 600.0))
    steps = planned_steps(task, random.Random(f"0/{task.id}"))
    actor.engines = ScriptedReplies(load_chat_tokenizer(tokenizer_path), steps,
                                    lambda: actor.env.unwrapped.pending_request)
    try:
        traj = actor.run_episode(WorkItem(task, task.id, group_id=0, member=0, attempt=0, admitted_version=0, seed=0))
    finally:
        actor.env.close()
        actor.harness[1].close()
    return traj, steps


def check_resolved(traj, steps, tokenizer_path):
    assert traj.outcome == "resolved" and traj.reward == 1.0, (traj.outcome, traj.error, traj.harness)
    # Its own exit, after the expert's finish: one request per planned step, one segment.
    assert traj.harness["harness_exit_code"] == 0 and "tool_agent: finished" in traj.harness["harness_output"]
    assert traj.harness["requests"] == len(steps) and traj.segment_starts == [0]
    assert traj.messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
    results = [m["content"] for m in traj.messages if m["role"] == "tool"]
    assert len(results) == len(steps) - 1 and results[0].startswith("exit 1\n") and results[-1].startswith("exit 0\n")
    # What trains is the expert's replies as the agent's tool calls, token for token.
    tokenizer = load_chat_tokenizer(tokenizer_path)
    replies = tokenizer.decode([t for t, m in zip(traj.token_ids, traj.loss_mask) if m])
    assert '{"name": "run", "arguments": {"command": ' in replies and '{"name": "finish", "arguments": {}}' in replies
    assert replies.count("<tool_call>") == len(steps) and steps[-1] is None
    assert expert_reply(None, SimpleNamespace(tools=TOOLS)) in replies


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
def test_tool_agent_resolves_a_micro_task_in_the_jail(tokenizer_path, task, tmp_path):
    traj, steps = play(SandboxConfig(workdir_root=str(tmp_path)), LocalSandbox, tokenizer_path, task)
    check_resolved(traj, steps, tokenizer_path)


def test_tool_agent_resolves_a_micro_task_in_a_container(docker_image, tokenizer_path, task):
    """The whole harness episode under docker: the agent bound read-only into the container at its
    host path, run by the image's own python3, its route the gateway socket's bind mount."""
    traj, steps = play(SandboxConfig(backend="docker", docker_image=docker_image, pool_size=0), DockerSandbox,
                       tokenizer_path, task)
    check_resolved(traj, steps, tokenizer_path)
