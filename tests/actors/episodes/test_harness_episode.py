"""swerve/Harness-v0 end to end without Ray: a harness program in a bubblewrap jail talks to the
episode actor's gateway through its only route, the real CPU engine answers, the workspace is graded."""
import shutil
import textwrap

import pytest
import yaml

from actors.engines.engine_actor import EngineActor
from actors.engines.engine_router import EngineRouter, local_call
from actors.episodes.episode_actor import EpisodeActor
from actors.episodes.gateway import GatewaySpec
from actors.episodes.trajectory import WorkItem
from configs.schema import EngineConfig, EnvConfig, HarnessConfig, RolloutConfig, SandboxConfig
from envs.sandboxes.local_sandbox import LocalSandbox
from envs.tasks.loaders import load_tasks
from envs.make import env_sandbox
from envs.outcomes import InfraError, InfraSource

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")]

# A harness as a user would write one: the OpenAI base URL and key from the environment, the
# task from SWERVE_TASK_FILE, work in the current folder. It asks twice (the second request
# extends the first with the reply it got), probes other routes, then applies the fix it carries.
HARNESS = textwrap.dedent('''
    import json, os, socket, subprocess, sys, urllib.request, urllib.error
    base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
    def ask(messages, **extra):
        request = urllib.request.Request(base + "/chat/completions", method="POST",
            data=json.dumps({"model": "mine", "messages": messages, **extra}).encode(),
            headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.load(response)
    task = open(os.environ["SWERVE_TASK_FILE"]).read()
    messages = [{"role": "system", "content": "HARNESS SYSTEM PROMPT"}, {"role": "user", "content": task}]
    first = ask(messages, max_tokens=8)
    messages += [first["choices"][0]["message"], {"role": "user", "content": "go on"}]
    second = ask(messages, max_tokens=8, logprobs=True)
    assert second["choices"][0]["logprobs"]["content"], second
    reached = []
    for host, port in (("127.0.0.1", int(sys.argv[2])), ("10.0.0.1", 80), ("1.1.1.1", 443)):
        try:
            socket.create_connection((host, port), timeout=2).close()
            reached.append(f"{host}:{port}")
        except OSError:
            pass
    print("REACHED", reached)
    subprocess.run(["patch", "-p1", "-i", sys.argv[1]], check=True)
''')


@pytest.fixture(scope="module")
def task():
    return load_tasks("builtin", "train")[0]


@pytest.fixture(scope="module")
def engine(model_path):
    """One engine server for the module's episodes, ended with it (a server left running holds
    ~400 MB and its share of the cores for the rest of the suite)."""
    engine = EngineActor(0, EngineConfig(), model_path)
    yield engine
    engine.close()


def run(tmp_path, engine, tokenizer_path, task, command_for, fail_at=None, **harness_fields):
    script, patch = tmp_path / "harness.py", tmp_path / "fix.patch"
    script.write_text(HARNESS)
    patch.write_text(task.gold_patch)
    seen = []

    class Recording(EngineRouter):
        def generate(self, request, sticky_key):
            if len(seen) == fail_at:
                seen.append(None)
                raise InfraError(InfraSource.ENGINE, "injected: the engine died")
            out = super().generate(request, sticky_key)
            seen.append((list(request.prompt_ids), out))
            return out

    engines = Recording([engine], local_call)
    env = EnvConfig(id="swerve/Harness-v0",
                    harness=HarnessConfig(name="command", command=command_for(script, patch),
                                          files=[str(script), str(patch)], **harness_fields))
    sandbox_cfg = env_sandbox(env, SandboxConfig())
    sandbox = LocalSandbox(sandbox_cfg)
    rollout = RolloutConfig(max_tokens_per_turn=16, max_episode_seconds=120.0)
    actor = EpisodeActor(0, rollout, env, sandbox_cfg, tokenizer_path, engines, None, sandbox,
                         gateway=GatewaySpec(4096, 600.0))
    try:
        traj = actor.run_episode(WorkItem(task, task.id, group_id=0, member=0, attempt=0, admitted_version=0, seed=5))
        if fail_at is not None:  # the same actor and lease go on: the failed episode's harness is gone
            seen[:] = [s for s in seen if s is not None] + [None] * 9
            again = actor.run_episode(WorkItem(task, task.id, 0, 0, 1, 0, seed=6))
            return traj, again
    finally:
        actor.env.close()
        actor.harness[1].close()
    return traj, seen


def test_a_harness_in_the_jail_is_served_token_exactly_and_graded(tmp_path, engine, tokenizer_path, task):
    traj, seen = run(tmp_path, engine, tokenizer_path, task,
                     lambda script, patch: f"python3 {script} {patch} 1")
    assert traj.outcome == "resolved" and traj.reward == 1.0, (traj.error, traj.harness)
    assert "REACHED []" in traj.harness["harness_output"]  # no route but its session
    assert traj.turns == 2 and traj.harness["requests"] == 2 and traj.segment_starts == [0]
    # Trained ids: the first prompt, each sampled reply exactly as the engine returned it, the new messages.
    (prompt1, out1), (prompt2, out2) = seen
    assert traj.token_ids[:len(prompt1)] == prompt1 and prompt2[:len(prompt1)] == prompt1
    assert prompt2[len(prompt1):len(prompt1) + len(out1.token_ids)] == out1.token_ids
    assert traj.token_ids[:len(prompt2)] == prompt2
    assert traj.token_ids[len(prompt2):len(prompt2) + len(out2.token_ids)] == out2.token_ids
    generated = [(t, lp) for t, lp, m in zip(traj.token_ids, traj.logprobs, traj.loss_mask) if m]
    assert generated == list(zip(out1.token_ids + out2.token_ids, out1.logprobs + out2.logprobs))
    assert traj.messages[0] == {"role": "system", "content": "HARNESS SYSTEM PROMPT"}
    assert traj.segment_messages == [traj.messages] and traj.segment_tools == [None]  # one segment, no tools
    assert [m["role"] for m in traj.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert traj.model_patch and not traj.tampered


def test_a_harness_that_ignores_its_session_end_is_stopped_at_the_request_cap(tmp_path, engine, tokenizer_path,
                                                                               task):
    # After its requests it would sleep for ever; the cap ends the episode and stops it.
    traj, _ = run(tmp_path, engine, tokenizer_path, task,
                  lambda script, patch: f"python3 {script} {patch} 1; sleep 1000", max_requests=1)
    assert traj.outcome == "truncated" and traj.turns == 1 and traj.reward == 0.0
    # Its second request, past the cap, is never answered: stopped, not finished.
    assert traj.harness["requests"] == 2 and traj.harness["harness_exit_code"] != 0


@pytest.mark.parametrize("config", ["default", "text"])
def test_mini_swe_agent_runs_unmodified_in_the_jail(tmp_path, engine, tokenizer_path, task, config):
    """The real mini-swe-agent 2.4.6 (`make harness`), in its default tool-calling configuration and
    its text-based one: the untrained policy's replies are its outcome (graded), never an infra error."""
    from envs.harnesses import mini_swe_agent_home
    mini_swe_agent_home()  # the set-up installs it (`make harness`); missing, this names the target
    env = EnvConfig(id="swerve/Harness-v0", harness=HarnessConfig(mini_swe_agent_config=config, max_requests=3))
    sandbox_cfg = env_sandbox(env, SandboxConfig())
    engines = EngineRouter([engine], local_call)
    actor = EpisodeActor(0, RolloutConfig(max_tokens_per_turn=16, max_episode_seconds=180.0), env, sandbox_cfg,
                         tokenizer_path, engines, None, LocalSandbox(sandbox_cfg), gateway=GatewaySpec(4096, 600.0))
    try:
        traj = actor.run_episode(WorkItem(task, task.id, group_id=0, member=0, attempt=0, admitted_version=0, seed=5))
    finally:
        actor.env.close()
        actor.harness[1].close()
    assert traj.outcome in ("unresolved", "truncated"), (traj.outcome, traj.error, traj.harness)
    assert traj.turns >= 1 and traj.messages[0]["role"] == "system"
    configs = next(mini_swe_agent_home().glob("lib/python*/site-packages/minisweagent/config"))
    own = yaml.safe_load((configs / ("mini.yaml" if config == "default" else "mini_textbased.yaml")).read_text())
    assert traj.messages[0]["content"] == own["agent"]["system_template"].strip()  # its own prompt, unmodified
    assert sum(traj.loss_mask) > 0 and len(traj.segment_starts) >= 1


def test_an_engine_failure_is_an_infra_error_and_stops_the_harness(tmp_path, engine, tokenizer_path, task):
    # The second request's generate fails; that episode is swerve's failure, and its harness,
    # which would sleep on, is stopped so that the next episode has the lease to itself.
    failed, again = run(tmp_path, engine, tokenizer_path, task,
                        lambda script, patch: f"python3 {script} {patch} 1; sleep 1000", fail_at=1, max_requests=2)
    assert failed.outcome == "infra_error" and failed.infra_source == "engine"
    assert again.outcome in ("resolved", "unresolved", "truncated"), (again.outcome, again.error)


def test_the_last_reply_allowed_still_acts_and_a_harness_that_then_ends_is_graded(tmp_path, engine, tokenizer_path,
                                                                                   task):
    # Its two requests, then it applies its fix and ends: at max_requests=2 that is graded, not truncated
    # (the cap used to end the episode before the harness could act on its last reply).
    traj, _ = run(tmp_path, engine, tokenizer_path, task, lambda script, patch: f"python3 {script} {patch} 1",
                  max_requests=2)
    assert traj.outcome == "resolved" and traj.turns == 2 and traj.reward == 1.0, (traj.outcome, traj.error)
    assert traj.harness["requests"] == 2 and traj.harness["harness_exit_code"] == 0
