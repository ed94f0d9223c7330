"""SFT traces in an agent harness's own format: the scripted expert answers its requests.

The harness (mini-swe-agent, unmodified) runs in the task's sandbox exactly as in rollout and
talks to the episode's session gateway; where the policy would sample, the expert's planned
step (envs/tasks/expert_plan.py) is the reply, written the way the harness parses actions (a
`<tool_call>` to its bash tool, or its text format) and encoded as if sampled. The trajectory's
token ids are then what SFT trains on, segment by segment: the very sequences the policy sees
and is trained on by RL, the harness's own prompts and observation wording included.
"""
from __future__ import annotations

import json
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional, Sequence

from actors.episodes.episode_actor import EpisodeActor
from actors.episodes.gateway import GatewaySpec
from actors.episodes.trajectory import WorkItem
from configs import Config
from envs.actions import COMMAND, SUBMIT, parse_action
from envs.tasks.expert_plan import plan_trace
from envs.harnesses import SUBMIT_SENTINEL
from envs.sandboxes.local_sandbox import LocalSandbox
from envs.make import env_sandbox
from envs.outcomes import Outcome
from envs.tasks.task import Task
from policies.chat.chat_tokenizer import IM_END, load_chat_tokenizer
from policies.sample_types import FINISH_STOP, SampleOutput, SampleRequest


def harness_reply(command: str, harness_config: str) -> str:
    """The text a policy would sample to make mini-swe-agent run `command`."""
    if harness_config == "text":
        return f"THOUGHT: next step.\n\n```mswea_bash_command\n{command}\n```"
    call = json.dumps({"name": "bash", "arguments": {"command": command}})
    return f"<tool_call>\n{call}\n</tool_call>"


def planned_commands(task: Task, rng: random.Random) -> list[str]:
    """The expert's commands for the task, its submit as mini-swe-agent's own."""
    commands = []
    for _, reply in plan_trace(task, rng, None, False):
        action = parse_action(reply)
        if action.kind == COMMAND:
            commands.append(action.command)
        elif action.kind == SUBMIT:
            commands.append(f"echo {SUBMIT_SENTINEL}")
    return commands


class ScriptedReplies:
    """Stands where the engines are: each generate call returns the next planned reply's ids."""

    def __init__(self, tokenizer, replies: Sequence[str]):
        self._ids = [tokenizer.encode(text) + [tokenizer.convert_tokens_to_ids(IM_END)] for text in replies]
        self.calls = 0

    def generate(self, request: SampleRequest, sticky_key: str) -> SampleOutput:
        ids = self._ids[min(self.calls, len(self._ids) - 1)]  # past the plan: submit again
        self.calls += 1
        return SampleOutput(list(ids), [0.0] * len(ids), [0] * len(ids), FINISH_STOP)

    def release(self, sticky_key: str) -> None:
        return None


def write_harness_traces(out_file: str, tasks: Sequence[Task], cfg: Config, tokenizer_path: str,
                         on_task: Optional[Callable[[int, int], None]] = None, workers: int = 2) -> dict:
    """One expert trajectory per task through the real harness; resolved ones are written as
    token rows (one per segment). Returns counts."""
    tokenizer = load_chat_tokenizer(tokenizer_path)
    sandbox_cfg = env_sandbox(cfg.env, cfg.sandbox)
    counts = {"tasks": len(tasks), "resolved": 0, "rows": 0, "segments_split": 0}
    lock = threading.Lock()
    local = threading.local()
    actors: list[EpisodeActor] = []

    def actor() -> EpisodeActor:
        if not hasattr(local, "actor"):
            local.actor = EpisodeActor(0, cfg.rollout, cfg.env, sandbox_cfg, tokenizer_path, None, None,
                                       LocalSandbox(sandbox_cfg), gateway=GatewaySpec.from_config(cfg))
            with lock:
                actors.append(local.actor)
        return local.actor

    def one(index_task: tuple[int, Task]) -> list[dict]:
        index, task = index_task
        rng = random.Random(f"{cfg.run.seed}/{task.id}")
        replies = [harness_reply(c, cfg.env.harness.mini_swe_agent_config) for c in planned_commands(task, rng)]
        episode = actor()
        episode.engines = ScriptedReplies(tokenizer, replies)
        traj = episode.run_episode(WorkItem(task, task.id, 0, index, 0, 0, seed=index))
        if traj.outcome != Outcome.RESOLVED.value:
            return []
        return [{"token_ids": s.token_ids, "loss_mask": s.loss_mask, "resolved": True, "task_id": task.id,
                 "segment": k} for k, s in enumerate(traj.samples(0.0))]

    try:
        with open(out_file, "w") as handle, ThreadPoolExecutor(max_workers=workers) as pool:
            for done, rows in enumerate(pool.map(one, enumerate(tasks)), 1):
                with lock:
                    counts["resolved"] += bool(rows)
                    counts["rows"] += len(rows)
                    counts["segments_split"] += max(0, len(rows) - 1)
                    for row in rows:
                        handle.write(json.dumps(row) + "\n")
                if on_task is not None:
                    on_task(done, counts["resolved"])
    finally:
        for episode in actors:
            episode.env.close()
            episode.harness[1].close()
    return counts
