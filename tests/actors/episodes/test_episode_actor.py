"""EpisodeActor without Ray: a real engine, the real SWE env and a real local sandbox."""
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from actors.engines.engine_actor import EngineActor
from actors.engines.engine_router import EngineRouter, local_call
from actors.episodes.episode_actor import EpisodeActor
from actors.episodes.gateway import GatewaySpec
from actors.fleet.remote import SandboxLease
from actors.training.sample_collector import SampleCollector
from actors.episodes.trajectory import WorkItem
from configs.schema import EngineConfig, EnvConfig, RolloutConfig, SandboxConfig
from envs.sandboxes.local_sandbox import LocalSandbox
from envs.tasks.loaders import load_tasks

pytestmark = pytest.mark.slow  # an engine server process

REPO = Path(__file__).resolve().parents[3]  # this checkout, wherever it was cloned


@pytest.fixture(scope="module")
def task():
    return load_tasks("builtin", "train")[0]


@pytest.fixture(scope="module")
def engine(model_path):
    """One engine server for the module's episodes (each start is a process importing torch), ended
    with it: a server left running holds ~400 MB and its share of the cores for the rest of the suite."""
    engine = EngineActor(0, EngineConfig(), model_path)
    yield engine
    engine.close()


def make_actor(engine, tokenizer_path, sandbox, collector=None, **rollout):
    cfg = RolloutConfig(max_turns=3, max_tokens_per_turn=16, **rollout)
    engines = EngineRouter([engine], local_call)
    # The run's sandbox section is the one its lease was built from.
    return EpisodeActor(0, cfg, EnvConfig(), sandbox.config, tokenizer_path, engines, collector, sandbox)


def work(task, seed=1):
    return WorkItem(task, task.id, group_id=0, member=0, attempt=0, admitted_version=0, seed=seed)


def test_episode_records_token_exact_trajectory(engine, tokenizer_path, task):
    actor = make_actor(engine, tokenizer_path, LocalSandbox(SandboxConfig()))
    traj = actor.run_episode(work(task))
    assert traj.outcome in ("format_error", "truncated") and 1 <= traj.turns <= 3
    assert len(traj.token_ids) == len(traj.loss_mask) == len(traj.logprobs) == len(traj.versions)
    generated = [v for v, m in zip(traj.versions, traj.loss_mask) if m]
    assert generated and set(generated) == {0}
    assert all(lp <= 0 for lp, m in zip(traj.logprobs, traj.loss_mask) if m)
    assert traj.sandbox_start_s is not None and traj.messages[0]["role"] == "system"
    assert traj.finished_s >= traj.started_s


def test_the_env_gets_the_runs_sandbox_and_env_sections(engine, tokenizer_path):
    sandbox = LocalSandbox(SandboxConfig(command_timeout_s=60.0))
    env = make_actor(engine, tokenizer_path, sandbox).env.unwrapped
    assert env.sandbox_config is sandbox.config and env.config == EnvConfig().swe


def test_token_cap_truncates(engine, tokenizer_path, task):
    actor = make_actor(engine, tokenizer_path, LocalSandbox(SandboxConfig()), max_total_tokens=16)
    traj = actor.run_episode(work(task))
    assert traj.outcome == "truncated" and traj.num_generated == 0


def test_broken_sandbox_is_infra_error_never_scored(engine, tokenizer_path, task, tmp_path):
    missing_root = str(tmp_path / "does-not-exist")
    actor = make_actor(engine, tokenizer_path, LocalSandbox(SandboxConfig(workdir_root=missing_root)))
    traj = actor.run_episode(work(task))
    assert traj.outcome == "infra_error" and traj.infra_source == "sandbox" and traj.reward == 0.0
    assert traj.token_ids == []


def test_an_episode_after_a_failed_reset_gets_a_working_env(engine, tokenizer_path, task, tmp_path):
    root = tmp_path / "created-later"
    actor = make_actor(engine, tokenizer_path, LocalSandbox(SandboxConfig(workdir_root=str(root))))
    assert actor.run_episode(work(task)).outcome == "infra_error"  # reset raised mid-way
    root.mkdir()  # the sandbox works again
    traj = actor.run_episode(work(task, seed=2))
    # gymnasium's passive checker kept half-set state from the failed reset and crashed the first step
    assert traj.outcome in ("format_error", "truncated") and traj.turns >= 1, traj.error


def test_run_loop_works_until_stop(engine, tokenizer_path, task):
    collector = SampleCollector(RolloutConfig(group_size=2, groups_per_batch=1, max_staleness=0), [task], [task.id], 0)
    actor = make_actor(engine, tokenizer_path, LocalSandbox(SandboxConfig()), collector=collector)
    original_submit = collector.submit

    def submit_then_stop(traj):
        original_submit(traj)
        if collector.counts["buffered"] == 2:
            collector.stop()

    collector.submit = submit_then_stop
    assert actor.run() == {"actor": "episode-0", "episodes": 2}
    batch = collector.next_batch(1.0)
    assert len(batch.samples) == 2 and collector.accounting()["trained"] == 2


class FlakySource:
    """A work source that fails as a dead one would (infra_error) once, then says stop."""

    def __init__(self):
        self.calls = 0

    def acquire(self, worker):
        from envs.outcomes import InfraError, InfraSource

        self.calls += 1
        if self.calls == 1:
            raise InfraError(InfraSource.ENV, "the work source's acquire failed: GetTimeoutError")
        return "stop"


def test_a_failing_work_source_makes_the_loop_ask_again_not_crash(engine, tokenizer_path):
    source = FlakySource()
    actor = make_actor(engine, tokenizer_path, LocalSandbox(SandboxConfig()), collector=source,
                       poll_interval_s=0.01)
    assert actor.run()["episodes"] == 0 and source.calls == 2



def test_the_episode_actor_and_its_arguments_import_no_loader_or_http_server():
    """One episode actor process per concurrent episode: aiohttp (only a harness episode's gateway
    serves HTTP) and the config loader (omegaconf) would be megabytes in each."""
    # What the actor's process loads: its class's module, and its arguments as actors/fleet/launch.py
    # passes them (unpickled there; the router and work source are modules of handles).
    arguments = pickle.dumps((GatewaySpec(1024, 60.0), SandboxLease(0, SandboxConfig(), "ns"), EnvConfig()))
    code = ("import json, pickle, sys; import actors.episodes.episode_actor; "
            "import actors.cluster.roles, actors.engines.engine_router; pickle.loads(sys.stdin.buffer.read()); "
            "print(json.dumps(sorted(n for n in ('aiohttp', 'omegaconf', 'torch') if n in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, input=arguments, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout) == []
