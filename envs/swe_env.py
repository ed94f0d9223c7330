"""swerve/SWE-v0: fix a repository through shell commands; reward 1 when its tests pass.

Its settings are typed sections of the run's config (configs/schema/), each with one home:
`swe` (env.swe: observation cap, format errors, grading limit, tampering), `sandbox` (the
LocalSandbox lease it builds when reset is given none) and `tasks` (what it picks when reset
is given no task). A command runs under its lease's sandbox.command_timeout_s: the env passes
no limit of its own. `envs.make.make_env` hands it the run's sections; a section may also be
given as a dict of its fields, and keyword arguments named after env.swe fields (env.kwargs)
override them.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Optional, TypeVar, Union

import gymnasium

from configs.schema import SandboxConfig, SWEEnvConfig, TasksConfig
from envs.actions import COMMAND, FORMAT_ERROR, parse_action
from envs.tasks.loaders import load_tasks
from envs.sandboxes.local_sandbox import LocalSandbox
from envs.outcomes import InfraError, InfraSource, Outcome
from envs.grading.pristine_view import grade_on_pristine, take_change_and_reset
from envs.sandboxes.sandbox import Sandbox
from envs.tasks.task import Task
from envs.text import MAX_ACTION_CHARS, text_space, truncate_middle
from envs.grading.workspace_change import ListingError, Manifest, take_manifest


Section = TypeVar("Section")


def _section(cls: type[Section], given: Union[Section, dict, None], name: str) -> Section:
    """A config section from a typed object (kept as is), a dict of its fields or None (defaults)."""
    if given is None:
        return cls()
    if isinstance(given, cls):
        return given
    if not isinstance(given, dict):
        raise TypeError(f"SWEEnv {name}= takes a {cls.__name__} or a dict of its fields, got {type(given).__name__}")
    _check_fields(cls, given, f"SWEEnv {name}")
    return cls(**given)


def _check_fields(cls: type, overrides: dict, what: str) -> None:
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(overrides) - set(valid))
    if not unknown:
        return
    homes = {f.name: "sandbox" for f in dataclasses.fields(SandboxConfig)}
    homes.update({f.name: "tasks" for f in dataclasses.fields(TasksConfig)})
    moved = [f"{key} is a {homes[key]} field ({homes[key]}={{'{key}': ...}})" for key in unknown if key in homes]
    raise TypeError(f"{what} got unknown argument(s) {unknown}; valid fields: {valid}"
                    + (f"; {'; '.join(moved)}" if moved else ""))


class SWEEnv(gymnasium.Env):
    metadata = {"render_modes": []}

    def __init__(self, render_mode: Optional[str] = None, *, swe: Union[SWEEnvConfig, dict, None] = None,
                 sandbox: Union[SandboxConfig, dict, None] = None, tasks: Union[TasksConfig, dict, None] = None,
                 **overrides: Any):
        if render_mode is not None:
            raise ValueError(f"SWEEnv renders nothing; got render_mode={render_mode!r}")
        _check_fields(SWEEnvConfig, overrides, "SWEEnv")
        self.config = dataclasses.replace(_section(SWEEnvConfig, swe, "swe"), **overrides)
        self.sandbox_config = _section(SandboxConfig, sandbox, "sandbox")
        self.tasks_config = _section(TasksConfig, tasks, "tasks")
        self.observation_space = text_space(self.config.max_observation_chars)
        self.action_space = text_space(MAX_ACTION_CHARS)
        self._tasks: Optional[list[Task]] = None
        self._own_sandbox: Optional[LocalSandbox] = None
        self._sandbox: Optional[Sandbox] = None
        self.task: Optional[Task] = None
        self._format_errors = 0
        self._done = True
        self._pristine: Optional[Manifest] = None

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        options = options or {}
        self.task = options.get("task") or self._pick_task()
        self._sandbox = options.get("sandbox") or self._local_sandbox()
        started_s = time.monotonic()
        self._sandbox.start(self.task)
        start_s = time.monotonic() - started_s
        # Taken before the agent's first command: what "pristine" means for grading.
        try:
            self._pristine = take_manifest(self._sandbox, self.config)
        except ListingError as error:
            raise InfraError(InfraSource.SANDBOX, f"{self.task.id}: {error}; raise sandbox.max_output_bytes "
                             "for a task this large") from error
        self._format_errors = 0
        self._done = False
        info = {"task_id": self.task.id, "sandbox_start_s": start_s, "outcome": None, "exec_s": 0.0}
        return self.fit_observation(self.task.problem_statement), info

    def step(self, action: str):
        if self._done:
            raise RuntimeError("step() called on a finished episode: call reset() first")
        parsed = parse_action(action)
        if parsed.kind == FORMAT_ERROR:
            return self._format_error(parsed.error)
        self._format_errors = 0
        if parsed.kind == COMMAND:
            return self._run(parsed.command)
        return self.grade()

    def close(self) -> None:
        if self._sandbox is not None and self._sandbox is not self._own_sandbox:
            self._sandbox.close()
        if self._own_sandbox is not None:
            self._own_sandbox.close()
        self._sandbox = None
        self._done = True

    def _format_error(self, message: str):
        self._format_errors += 1
        terminated = self._format_errors >= self.config.max_consecutive_format_errors
        self._done = terminated
        info = {"outcome": Outcome.FORMAT_ERROR.value if terminated else None, "exec_s": 0.0}
        if terminated:
            info["model_patch"], info["tampered"] = self.final_change()
        return self.fit_observation(message), 0.0, terminated, False, info

    def _run(self, command: str):
        # No limit of our own: the sandbox applies its sandbox.command_timeout_s, the run's.
        result = self._sandbox.exec(command)
        header = f"exit code: {result.exit_code}"
        if result.timed_out:
            header += f" (timed out after {result.timeout_s}s; the command was killed)"
        if result.output_truncated:
            header += " (output truncated at sandbox.max_output_bytes; narrow it with head or grep)"
        info = {"outcome": None, "exec_s": result.duration_s, "exit_code": result.exit_code,
                "output_truncated": result.output_truncated}
        return self.fit_observation(f"{header}\n{result.output}"), 0.0, False, False, info

    def grade(self):
        """Grade the workspace on the pristine view and end the episode (the agent's submit; a
        harness's exit under swerve/Harness-v0): the step tuple of that last step."""
        started_s = time.monotonic()
        verdict = grade_on_pristine(self._sandbox, self.task, self._pristine, self.config, self.sandbox_config)
        self._done = True
        outcome = Outcome.RESOLVED if verdict.resolved else Outcome.UNRESOLVED
        tampered = verdict.change.tampered
        if verdict.reason:
            lines = [f"{outcome.value}: {verdict.reason}"]
        elif verdict.result is None:
            lines = [f"{outcome.value}: the change touches paths the task protects, so it scores 0"]
        else:
            lines = [f"{outcome.value}: test command exit code {verdict.result.exit_code}"]
            lines += [f"{status} {node_id}" for node_id, status in sorted(verdict.result.test_status.items())]
            lines += [f"grading: {problem}" for problem in verdict.result.problems]
            hidden = verdict.result.hidden_status
            if hidden:
                passed = sum(status == "PASSED" for status in hidden.values())
                lines.append(f"hidden cases: {passed}/{len(hidden)} passed")
        test_status = verdict.result.test_status if verdict.result is not None else {}
        lines += [f"protected, not graded: {path} ({reason})" for path, reason in sorted(tampered.items())]
        info = {
            "outcome": outcome.value,
            "exec_s": time.monotonic() - started_s,
            "test_status": test_status,
            "model_patch": verdict.change.model_patch,
            "tampered": dict(tampered),
            "unresolved_reason": verdict.reason,
            "hidden_status": dict(verdict.result.hidden_status) if verdict.result is not None else {},
            "grading_problems": list(verdict.result.problems) if verdict.result is not None else [],
        }
        # A Harbor verifier's reward may be a fraction; every other verdict is 1 or 0.
        reward = verdict.result.score if verdict.result is not None else 0.0
        return self.fit_observation("\n".join(lines)), reward, True, False, info

    def final_change(self) -> tuple[str, dict]:
        """For an episode a cap ended: the allowed part of the workspace's change as a unified
        diff (SWE-bench's `model_patch`; see envs/grading/protection.py) and the protected paths it
        touched (path -> why). It resets the workspace, so only at an episode's end; ("", {})
        before one started. InfraError when the sandbox fails under it: the episode's record is
        then incomplete, and its caller ends the episode as that infra error."""
        if self._sandbox is None or self.task is None or self._pristine is None:
            return "", {}
        change = take_change_and_reset(self._sandbox, self.task, self._pristine, self.config)
        return change.model_patch, dict(change.tampered)

    @property
    def sandbox(self) -> Optional[Sandbox]:
        """The episode's sandbox lease (None before reset)."""
        return self._sandbox

    def _pick_task(self) -> Task:
        tasks = self.tasks_config
        if self._tasks is None:
            self._tasks = load_tasks(tasks.source, tasks.split, tasks.ids, tasks.format)
        if not self._tasks:
            raise ValueError(f"no tasks in source {tasks.source!r}, split {tasks.split!r}")
        return self._tasks[int(self.np_random.integers(len(self._tasks)))]

    def _local_sandbox(self) -> LocalSandbox:
        if self._own_sandbox is None:
            self._own_sandbox = LocalSandbox(self.sandbox_config)
        return self._own_sandbox

    def fit_observation(self, text: str) -> str:
        return truncate_middle(text, self.config.max_observation_chars)
