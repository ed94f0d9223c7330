"""EpisodeActor: runs one agent episode at a time, then asks for the next.

It knows the policy side (tokens in, tokens out) and a gymnasium text env; it knows no
particular environment. Infra failures are classified here, never scored.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Optional

from actors.episodes.faults import FaultPlan
from actors.episodes.gateway_spec import POLICY_MODEL_ID, GatewaySpec
from actors.episodes.harness_player import HarnessPlayer
from actors.episodes.trajectory import STOP, Trajectory, WorkItem, oldest_version
from configs.schema import EnvConfig, RolloutConfig, SandboxConfig
from envs.make import make_env
from envs.outcomes import InfraError, InfraSource, Outcome
from envs.tasks.task import Task
from policies.chat.chat_session import ChatSession
from policies.chat.conversation import Conversation
from policies.sample_types import SampleRequest, age_priority
from policies.seeds import derive_seed
from policies.chat.chat_tokenizer import IM_END, load_chat_tokenizer

if TYPE_CHECKING:
    from actors.episodes.gateway import Gateway

log = logging.getLogger(__name__)


class EpisodeActor:
    def __init__(self, index: int, rollout: RolloutConfig, env_cfg: EnvConfig, sandbox_cfg: SandboxConfig,
                 tokenizer_path: str, engines, collector, sandbox, faults: Optional[FaultPlan] = None,
                 gateway: Optional[GatewaySpec] = None):
        """sandbox_cfg: the run's sandbox section (the env runs every command under its
        command_timeout_s); engines: an EngineRouter; collector: a SampleCollector (or its proxy); sandbox: a Sandbox;
        faults: the injection plan when faults.* is set (actors/episodes/faults.py wraps engines and sandbox);
        gateway: what the session gateway of an agent-harness env (swerve/Harness-v0) serves, None for other envs."""
        self.name = f"episode-{index}"
        self.cfg = rollout
        self.env_cfg = env_cfg
        self.sandbox_cfg = sandbox_cfg
        self.tokenizer = load_chat_tokenizer(tokenizer_path)
        self.stop_ids = (self.tokenizer.convert_tokens_to_ids(IM_END),)
        self.fault_plan = faults
        self.engines = faults.wrap_router(engines) if faults else engines
        self.collector = collector
        self.sandbox = faults.wrap_sandbox(sandbox) if faults else sandbox
        self.env = make_env(env_cfg, sandbox_cfg)
        self.harness = self._harness_side(gateway)
        self.episodes = 0
        # Per injected fault kind: how many, how many ended their episode as infra_error (so were
        # excluded and re-run), and the infra sources they showed up as.
        self.faults: dict[str, dict] = {}

    def run(self) -> dict:
        """Work until the collector says stop; returns how many episodes ran."""
        work = self._ask(self.collector.acquire, self.name)
        while work != STOP:
            if work is None:
                time.sleep(self.cfg.poll_interval_s)
                work = self._ask(self.collector.acquire, self.name)
            else:
                work = self._ask(self.collector.exchange, self.run_episode(work), self.name)
        self.env.close()
        if self.harness is not None:
            self.harness[1].close()
        # Fault counts only when faults.* injected any: a run without faults reports what it always did.
        return {"actor": self.name, "episodes": self.episodes, **({"faults": self.faults} if self.faults else {})}

    def _ask(self, call, *args):
        """A call to the work source; when it fails (dead or silent past its deadline: the driver
        rolls the run back and ends this actor), the loop asks again for work, never re-sending a
        trajectory that may already have landed."""
        try:
            return call(*args)
        except InfraError as err:
            log.warning("%s: %s; asking again", self.name, err)
            return None

    def _faults_injected(self) -> Counter:
        return Counter(self.fault_plan.injected) if self.fault_plan else Counter()

    def _record_faults(self, injected: Counter, traj: Trajectory) -> None:
        for kind, count in injected.items():
            entry = self.faults.setdefault(kind, {"injected": 0, "recovered": 0, "sources": {}})
            entry["injected"] += count
            if traj.is_infra_error:
                entry["recovered"] += count
                entry["sources"][traj.infra_source] = entry["sources"].get(traj.infra_source, 0) + count

    def run_episode(self, work: WorkItem) -> Trajectory:
        self.episodes += 1
        traj = Trajectory(work.group_id, work.member, work.attempt, work.task_id, work.admitted_version,
                          outcome=Outcome.TRUNCATED.value, started_s=time.time())
        sticky_key = f"{self.name}/{self.episodes}"
        conv = None
        faults_before = self._faults_injected()
        try:
            options = {"task": work.task, "sandbox": self.sandbox}
            if self.harness is not None:
                options.update(gateway=self.harness[1], deadline_s=self._time_cap_s(work))
            obs, info = self.env.reset(seed=work.seed, options=options)
            traj.sandbox_start_s = info.get("sandbox_start_s")
            if self.harness is not None:
                conv = self.harness[0].play(self.env, info, work, traj, self.engines, sticky_key)
            else:
                conv = Conversation(self.tokenizer, self.env_cfg.system_prompt, obs)
                self._play(work, conv, traj, sticky_key)
        except InfraError as err:
            self._mark_infra(traj, err.source, str(err))
            self._renew_env()
        except Exception as err:  # noqa: BLE001 - classified and counted as infra_error(unknown), never scored
            log.exception("%s: episode of %s crashed", self.name, work.task_id)
            self._mark_infra(traj, InfraSource.UNKNOWN, f"{type(err).__name__}: {err}")
            self._renew_env()
        finally:
            self.engines.release(sticky_key)
        if isinstance(conv, ChatSession):
            self._take_segments(conv, traj)
        elif conv is not None:
            traj.token_ids, traj.loss_mask = list(conv.token_ids), list(conv.loss_mask)
            traj.logprobs, traj.versions = list(conv.logprobs), list(conv.versions)
            traj.messages = conv.messages()
        traj.finished_s = time.time()
        self._record_faults(self._faults_injected() - faults_before, traj)
        return traj

    def _harness_side(self, gateway: Optional[GatewaySpec]) -> Optional[tuple[HarnessPlayer, Gateway]]:
        """The player and this actor's session gateway when the env is an agent-harness env."""
        if self.env.unwrapped.metadata.get("protocol") != "openai-chat":
            return None
        if gateway is None:
            raise ValueError(f"env {self.env_cfg.id} needs a session gateway: build the episode actor with gateway="
                             "GatewaySpec.from_config(cfg) (actors/fleet/launch.py does)")
        # Imported here: only a harness episode serves HTTP, and aiohttp costs every other episode
        # actor's process megabytes (one such process per concurrent episode).
        from actors.episodes.gateway import Gateway

        player = HarnessPlayer(self.tokenizer, self.env_cfg.harness, self.cfg, POLICY_MODEL_ID, gateway.max_model_len)
        return player, Gateway(POLICY_MODEL_ID, gateway.max_model_len, gateway.request_deadline_s, gateway.step_s)

    @staticmethod
    def _take_segments(chat: ChatSession, traj: Trajectory) -> None:
        for segment in chat.segments:
            traj.segment_starts.append(len(traj.token_ids))
            traj.token_ids += segment.token_ids
            traj.loss_mask += segment.loss_mask
            traj.logprobs += segment.logprobs
            traj.versions += segment.versions
        traj.segment_messages = chat.segment_messages()
        traj.segment_tools = [segment.tools for segment in chat.segments]
        traj.messages = chat.transcript()

    def _renew_env(self) -> None:
        """An exception inside reset or step leaves the env, and its wrappers, half-updated
        (gymnasium's passive checker then fails the next episode's first step): the next episode
        gets a fresh env. The old one is dropped, not closed: closing would close the sandbox
        lease, which belongs to this actor and is reused."""
        self.env = make_env(self.env_cfg, self.sandbox_cfg)

    def _play(self, work: WorkItem, conv: Conversation, traj: Trajectory, sticky_key: str) -> None:
        deadline = time.monotonic() + self._time_cap_s(work)
        for turn in range(self.cfg.max_turns):
            room = self.cfg.max_total_tokens - len(conv.token_ids)
            if room <= 0:
                break  # token cap: stays TRUNCATED
            # Oldest first: the version of its oldest generated token, as the staleness bound counts.
            oldest = oldest_version(conv.versions, conv.loss_mask, work.admitted_version)
            request = SampleRequest(list(conv.token_ids), min(self.cfg.max_tokens_per_turn, room),
                                    self.cfg.temperature, self.cfg.top_p, self.stop_ids,
                                    seed=derive_seed(work.seed, turn),
                                    priority=age_priority(oldest, traj.started_s))
            out = self.engines.generate(request, sticky_key)
            text = conv.append_generation(out.token_ids, out.logprobs, out.versions)
            obs, reward, terminated, truncated, info = self.env.step(text)
            traj.turns += 1
            if terminated or truncated:
                traj.record_end(reward, terminated, info, self._final_change)
                return
            if time.monotonic() > deadline:
                break  # time cap: stays TRUNCATED
            conv.append_observation(obs)
        # A cap ended the episode (turn, token or time): still record the workspace's change.
        traj.model_patch, traj.tampered = self._final_change()

    def _time_cap_s(self, work: WorkItem) -> float:
        """rollout.max_episode_seconds, or a Harbor task's own [agent] timeout_sec (times
        env.swe.harbor_timeout_multiplier) when that is shorter."""
        own_s = work.task.agent_timeout_s * self.env_cfg.swe.harbor_timeout_multiplier if isinstance(work.task, Task) else 0.0
        return min(self.cfg.max_episode_seconds, own_s) if own_s > 0 else self.cfg.max_episode_seconds

    def _final_change(self) -> tuple[str, dict]:
        """The env's final workspace diff and tampered paths when it offers them
        (SWEEnv.final_change; any Gymnasium text env may not), else ("", {})."""
        capture = getattr(self.env.unwrapped, "final_change", None)
        return capture() if callable(capture) else ("", {})

    @staticmethod
    def _mark_infra(traj: Trajectory, source: InfraSource, message: str) -> None:
        traj.outcome = Outcome.INFRA_ERROR.value
        traj.infra_source = source.value
        traj.error = message[:2000]
        traj.reward = 0.0
