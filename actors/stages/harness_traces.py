"""SFT traces in an agent harness's own format: the scripted expert answers its requests.

The harness (mini-swe-agent, unmodified) runs in the task's sandbox exactly as in rollout and
talks to the episode's session gateway; where the policy would sample, the expert's planned
step (envs/tasks/expert_plan.py) is the reply, encoded as if sampled and written the way the
request being answered takes actions, read from the tools it offers, whatever the harness: a
`<tool_call>` to the tool with a `command` parameter (mini-swe-agent's bash, tool-agent's run),
the plan's submit as a call to a tool without parameters (tool-agent's finish) or, where none is
offered, as mini-swe-agent's submit command; a request without tools gets mini-swe-agent's text
format. The trajectory's
token ids are then what SFT trains on, segment by segment: the very sequences the policy sees
and is trained on by RL, the harness's own prompts and observation wording included.
pipeline.recovery_rate of the traces, as for swerve/SWE-v0's, make a wrong edit first (checked in
swerve/SWE-v0 to fail the tests), see the tests fail, look again and fix it. Each row
also carries its segment's messages and tools (tool calls kept), so the trace reads as an
OpenAI-style one too and renders back into the same ids (policies/training/sft.py).
"""
from __future__ import annotations

import json
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional, Sequence

from actors.episodes.episode_actor import EpisodeActor
from actors.episodes.gateway import GatewaySpec
from actors.episodes.trajectory import Trajectory, WorkItem
from configs import Config
from configs.schema import EnvConfig
from envs.actions import COMMAND, SUBMIT, parse_action
from envs.expert import WRONG_EDITS_TRIED, run_trace
from envs.tasks.expert_plan import has_wrong_edit, parse_gold_patch, plan_trace, read_lines, wrong_lines
from envs.harnesses import SUBMIT_SENTINEL
from envs.sandboxes.local_sandbox import LocalSandbox
from envs.make import env_sandbox, make_env
from envs.outcomes import Outcome
from envs.tasks.task import Task
from policies.chat.chat_tokenizer import IM_END, load_chat_tokenizer
from policies.chat.openai_wire import ChatRequest
from policies.sample_types import FINISH_STOP, SampleOutput, SampleRequest


def harness_reply(command: str, harness_config: str) -> str:
    """The text a policy would sample to make mini-swe-agent run `command`."""
    if harness_config == "text":
        return f"THOUGHT: next step.\n\n```mswea_bash_command\n{command}\n```"
    return _tool_call("bash", {"command": command})


def _tool_call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def expert_reply(step: Optional[str], request: ChatRequest) -> str:
    """The text a policy would sample to take a planned step (a command; None: submit) in the
    harness that sent `request`, read from the tools it offers (the module docstring's rules)."""
    tools = [tool["function"] for tool in request.tools or () if tool.get("type") == "function"]
    submit = f"echo {SUBMIT_SENTINEL}"
    if not tools:
        return harness_reply(submit if step is None else step, "text")
    runner = next((tool for tool in tools if "command" in tool.get("parameters", {}).get("properties", {})), None)
    finisher = next((tool for tool in tools if not tool.get("parameters", {}).get("properties")), None)
    if step is None and finisher is not None:
        return _tool_call(finisher["name"], {})
    if runner is None:
        raise ValueError("the expert runs commands through a tool with a `command` parameter; the harness offers "
                         f"{', '.join(tool.get('name', '?') for tool in tools)}")
    return _tool_call(runner["name"], {"command": submit if step is None else step})


def planned_steps(task: Task, rng: random.Random, wrong: Optional[str] = None) -> list[Optional[str]]:
    """The expert's commands for the task, None where it submits; with `wrong` (a wrong version of
    the fixed line), a wrong edit first, the failing tests, a second look and the fix."""
    steps: list[Optional[str]] = []
    for _, reply in plan_trace(task, rng, wrong, False):
        action = parse_action(reply)
        if action.kind == COMMAND:
            steps.append(action.command)
        elif action.kind == SUBMIT:
            steps.append(None)
    return steps


def planned_commands(task: Task, rng: random.Random) -> list[str]:
    """The expert's commands for the task, its submit as mini-swe-agent's own."""
    return [f"echo {SUBMIT_SENTINEL}" if step is None else step for step in planned_steps(task, rng)]


class ScriptedReplies:
    """Stands where the engines are: each generate call returns the ids of the next planned step's
    reply, written for the request being answered (`pending()`, the env's pending_request)."""

    def __init__(self, tokenizer, steps: Sequence[Optional[str]], pending: Callable[[], ChatRequest]):
        self._tokenizer, self._steps, self._pending = tokenizer, list(steps), pending
        self._end = [tokenizer.convert_tokens_to_ids(IM_END)]
        self.calls = 0

    def generate(self, request: SampleRequest, sticky_key: str) -> SampleOutput:
        step = self._steps[min(self.calls, len(self._steps) - 1)]  # past the plan: submit again
        self.calls += 1
        ids = self._tokenizer.encode(expert_reply(step, self._pending())) + self._end
        return SampleOutput(ids, [0.0] * len(ids), [0] * len(ids), FINISH_STOP)

    def release(self, sticky_key: str) -> None:
        return None


def trace_rows(traj: Trajectory) -> list[dict]:
    """A resolved harness trajectory as SFT rows, one per segment: its token ids and loss mask (what
    SFT trains on), and the segment's messages and tools in message form, tool calls and their
    results' call ids kept, which the chat template renders back into the same ids."""
    bounds = [*traj.segment_starts, len(traj.token_ids)]
    if len(traj.segment_messages) != len(traj.segment_starts) or len(traj.segment_tools) != len(traj.segment_starts):
        raise ValueError(f"trajectory of {traj.task_id}: {len(traj.segment_starts)} segments but "
                         f"{len(traj.segment_messages)} message lists and {len(traj.segment_tools)} tool lists; "
                         f"a harness episode's trajectory keeps one of each per segment (EpisodeActor._take_segments)")
    return [{"token_ids": traj.token_ids[a:b], "loss_mask": traj.loss_mask[a:b], "messages": messages,
             **({"tools": tools} if tools else {}), "resolved": True, "task_id": traj.task_id, "segment": k}
            for k, (a, b, messages, tools) in enumerate(zip(bounds, bounds[1:], traj.segment_messages,
                                                            traj.segment_tools))]


def write_harness_traces(out_file: str, tasks: Sequence[Task], cfg: Config, tokenizer_path: str,
                         on_task: Optional[Callable[[int, int], None]] = None, workers: int = 2) -> dict:
    """One expert trajectory per task through the real harness; resolved ones are written as
    token rows (one per segment). Returns counts."""
    tokenizer = load_chat_tokenizer(tokenizer_path)
    sandbox_cfg = env_sandbox(cfg.env, cfg.sandbox)
    counts = {"tasks": len(tasks), "resolved": 0, "rows": 0, "segments_split": 0, "with_recovery": 0}
    # As for swerve/SWE-v0's traces (envs/expert.py): pipeline.recovery_rate of the traces make a wrong
    # edit, see the tests fail, look again and fix it; tasks without a plausible wrong edit get none,
    # so the others get more.
    recoverable = {task.id for task in tasks if has_wrong_edit(task)}
    recovery_rate = min(1.0, cfg.pipeline.recovery_rate * len(tasks) / len(recoverable)) if recoverable else 0.0
    lock = threading.Lock()
    local = threading.local()
    actors: list[EpisodeActor] = []
    checkers: list = []

    def actor() -> EpisodeActor:
        if not hasattr(local, "actor"):
            local.actor = EpisodeActor(0, cfg.rollout, cfg.env, sandbox_cfg, tokenizer_path, None, None,
                                       LocalSandbox(sandbox_cfg), gateway=GatewaySpec.from_config(cfg))
            with lock:
                actors.append(local.actor)
        return local.actor

    def checks_out(task: Task, wrong: str) -> bool:
        """Whether the recovery plan holds step by step (the wrong edit applies and makes the tests
        fail, the fix makes them pass), played first in swerve/SWE-v0: a harness reports commands'
        exit codes only in its own wording."""
        if not hasattr(local, "checker"):
            local.checker = make_env(EnvConfig(swe=cfg.env.swe), sandbox_cfg)
            with lock:
                checkers.append(local.checker)
        steps = plan_trace(task, random.Random(f"{cfg.run.seed}/{task.id}"), wrong, False)
        return run_trace(local.checker, task, steps, "", True) is not None

    def play(index: int, task: Task, wrong: Optional[str]) -> list[dict]:
        episode = actor()
        # The plan's own RNG, whatever was drawn for the recovery: a plain plan is the same with or without it.
        steps = planned_steps(task, random.Random(f"{cfg.run.seed}/{task.id}"), wrong)
        episode.engines = ScriptedReplies(tokenizer, steps, lambda: episode.env.unwrapped.pending_request)
        traj = episode.run_episode(WorkItem(task, task.id, 0, index, 0, 0, seed=index))
        return trace_rows(traj) if traj.outcome == Outcome.RESOLVED.value else []

    def one(index_task: tuple[int, Task]) -> tuple[list[dict], bool]:
        """The task's rows, and whether they hold a recovery."""
        index, task = index_task
        choice = random.Random(f"{cfg.run.seed}/{task.id}/recovery")
        if task.id in recoverable and choice.random() < recovery_rate:
            fix = parse_gold_patch(task.gold_patch)
            candidates = wrong_lines(fix, read_lines(task, fix.path))
            choice.shuffle(candidates)
            for wrong in candidates[:WRONG_EDITS_TRIED]:
                rows = play(index, task, wrong) if checks_out(task, wrong) else []
                if rows:
                    return rows, True
        return play(index, task, None), False

    try:
        with open(out_file, "w") as handle, ThreadPoolExecutor(max_workers=workers) as pool:
            for done, (rows, recovered) in enumerate(pool.map(one, enumerate(tasks)), 1):
                with lock:
                    counts["resolved"] += bool(rows)
                    counts["with_recovery"] += bool(rows) and recovered
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
        for checker in checkers:
            checker.close()
    return counts
