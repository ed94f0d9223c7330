"""swerve/Harness-v0: an unmodified agent harness fixes a repository inside the task's sandbox.

reset() starts the harness (env.harness) in the task's sandbox lease, pointed at its own session
of the gateway (`options["gateway"]`, actors/episodes/gateway.py) as its OpenAI base URL, and returns its
first request. Each request the harness makes is an observation: its text is the new messages,
and `info["request"]` holds the request itself (`.request`, a policies.chat.openai_wire.ChatRequest)
for the player, which renders and generates. Each action is the answer to that request, as JSON:
`{"status": 200, "body": {chat.completion}}` or an error body with its status. The episode ends
when the harness exits (its own "submit" just ends it): the workspace is then graded on the
pristine view exactly as swerve/SWE-v0 grades it, tamper protection included. A cap ends it
truncated: a request past env.harness.max_requests (the last reply allowed still acts: a harness
that ends within LAST_REPLY_GRACE_S of it is graded), or rollout's episode time through
`options["deadline_s"]`.

The harness's only network route is its session: the sandbox's gateway socket, reached through
a forwarder on the jail's loopback (envs/sandboxes/gateway_route.py). A harness that fails because of what
the agent did is the agent's outcome (graded, its output tail kept in info["harness_output"]);
only swerve's side failing (the route, the harness install) is an infra error.
"""
from __future__ import annotations

import base64
import json
import shlex
import threading
import time
from typing import Any, Optional, Union

import gymnasium

from configs.schema import HarnessConfig, RolloutConfig
from envs.sandboxes.gateway_route import GATEWAY_MOUNT, JAIL_PORT, harness_script, route_failed, socket_path_for
from envs.harnesses import harness_command
from envs.outcomes import InfraError, InfraSource, Outcome
from envs.sandboxes.sandbox import ExecResult
from envs.swe_env import SWEEnv, _section
from envs.text import MAX_ACTION_CHARS, text_space

TASK_FILE = "/tmp/swerve-task.md"
# Exit codes that say the harness never ran: the shell found no such program / could not run it.
NOT_RUN_EXITS = (126, 127)
OUTPUT_TAIL_CHARS = 4000
# A stopped harness gets SIGTERM, then SIGKILL after this long; its sandbox call returns soon after.
STOP_GRACE_S = 2
STOP_WAIT_S = 30.0
_POLL_S = 0.05
# How long a harness may take to end after the last reply env.harness.max_requests allows (writing
# its own files, running that reply's command): the harnesses here end in well under a second.
LAST_REPLY_GRACE_S = 5.0


class HarnessEnv(gymnasium.Env):
    metadata = {"render_modes": [], "protocol": "openai-chat"}

    def __init__(self, render_mode: Optional[str] = None, *, harness: Union[HarnessConfig, dict, None] = None,
                 **swe_sections: Any):
        """harness: env.harness; the rest (swe, sandbox, tasks, env.swe overrides) as SWEEnv takes them."""
        self.harness_config = _section(HarnessConfig, harness, "harness")
        self._swe = SWEEnv(render_mode, **swe_sections)
        self.observation_space = self._swe.observation_space
        self.action_space = text_space(MAX_ACTION_CHARS * 64)  # an answer carries a whole completion
        self._gateway = None
        self._session = None
        self._pending = None
        self._thread: Optional[threading.Thread] = None
        self._result: dict = {}
        self._deadline = float("inf")
        self._stop_file = None
        self._done = True

    @property
    def task(self):
        return self._swe.task

    @property
    def pending_request(self):
        """The request being answered now (a ChatRequest, as in info["request"].request), None
        between requests: what a scripted answerer reads, such as the expert's tools."""
        return None if self._pending is None else self._pending.request

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        options = dict(options or {})
        gateway = options.pop("gateway", None)
        if gateway is None:
            raise ValueError("swerve/Harness-v0 needs options['gateway'] (an actors.episodes.gateway.Gateway): the episode "
                             "actor passes its own; run it through `swerve train` / `swerve eval`")
        budget_s = float(options.pop("deadline_s", RolloutConfig.max_episode_seconds))
        self._close_session()
        _, info = self._swe.reset(seed=seed, options=options)
        sandbox = self._swe.sandbox
        host_socket = socket_path_for(sandbox)
        if host_socket is None:
            raise InfraError(InfraSource.SANDBOX, f"sandbox backend {type(sandbox).__name__} offers no gateway "
                             "route, which swerve/Harness-v0 needs (see envs/sandboxes/gateway_route.py)")
        gateway.listen_unix(str(host_socket))
        self._gateway, self._session = gateway, gateway.open()
        self._deadline = time.monotonic() + budget_s
        self._stop_file = host_socket.parent / f"stop-{self._session.sid}"
        self._done, self._result, self._pending = False, {}, None
        self._start_harness(sandbox, budget_s)
        obs, terminated, extra = self._wait()
        if terminated:
            raise InfraError(InfraSource.ENV, f"{self.task.id}: the harness made no request before it ended: "
                             f"{extra.get('harness_output', '')[-500:]}")
        return obs, {**info, **extra}

    def step(self, action: str):
        if self._done or self._pending is None:
            raise RuntimeError("step() called on a finished episode: call reset() first")
        status, body = _parse_answer(action)
        self._pending.answer(status, body)
        self._pending = None
        last = self._session.requests >= self.harness_config.max_requests
        # The last reply allowed still acts (a finish, a final command): the harness gets a moment
        # to end on it, and is graded if it does; asking again, or lingering, is the cap.
        obs, terminated, info = self._wait(LAST_REPLY_GRACE_S if last else None)
        if terminated:
            return self._grade(info)
        if info.get("truncated"):
            return self._truncate(info["truncated"])
        if last:
            return self._truncate(f"env.harness.max_requests={self.harness_config.max_requests} reached")
        return obs, 0.0, False, False, info

    def final_change(self) -> tuple[str, dict]:
        return self._swe.final_change()

    def stop_harness(self) -> None:
        """End the episode's session and stop its harness (the player failed under it)."""
        self._done = True
        self._close_session()

    def close(self) -> None:
        self._close_session()
        self._swe.close()
        self._done = True

    # --- the harness process ----------------------------------------------------------------
    def _start_harness(self, sandbox, budget_s: float) -> None:
        launch = harness_command(self.harness_config, task_file=TASK_FILE, workdir=".",
                                 command_timeout_s=self._swe.sandbox_config.command_timeout_s)
        environment = {**launch.env, "OPENAI_BASE_URL": f"http://127.0.0.1:{JAIL_PORT}/sessions/{self._session.sid}/v1",
                       "OPENAI_API_KEY": self._session.api_key, "SWERVE_TASK_FILE": TASK_FILE}
        statement = base64.b64encode(self.task.problem_statement.encode()).decode()
        exports = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in sorted(environment.items()))
        script = (f"printf %s {statement} | base64 -d > {TASK_FILE}\n{exports}"
                  + harness_script(_stoppable(launch.command, self._session.sid), JAIL_PORT))

        def run() -> None:
            try:
                self._result["exec"] = sandbox.exec(script, timeout_s=budget_s)
            except InfraError as error:
                self._result["error"] = error

        self._thread = threading.Thread(target=run, name=f"harness-{self._session.sid}", daemon=True)
        self._thread.start()

    def _wait(self, within_s: Optional[float] = None) -> tuple[str, bool, dict]:
        """The next request (obs, False, info), or the harness's end (text, True, info); with
        `within_s`, (obs or "", False, info) once that long passed without the harness ending."""
        until = time.monotonic() + within_s if within_s is not None else None
        while True:
            pending = self._session.next_request(_POLL_S)
            if pending is not None:
                self._pending = pending
                text = self._swe.fit_observation(_new_messages_text(pending.request.messages))
                return text, False, {"request": pending, "outcome": None}
            if not self._thread.is_alive() and self._session.inbox.empty():
                return "", True, self._harness_end()
            if time.monotonic() > self._deadline:
                return "", False, {"truncated": "the episode's time cap (rollout.max_episode_seconds) passed"}
            if until is not None and time.monotonic() > until:
                return "", False, {"outcome": None}

    def _harness_end(self) -> dict:
        if "error" in self._result:
            raise self._result["error"]
        result: ExecResult = self._result["exec"]
        tail = result.output[-OUTPUT_TAIL_CHARS:]
        if route_failed(result):
            raise InfraError(InfraSource.SANDBOX, f"the gateway route into the sandbox failed: {tail[-1000:]}")
        if result.exit_code in NOT_RUN_EXITS and self._session.requests == 0:
            raise InfraError(InfraSource.ENV, f"the harness could not start (exit {result.exit_code}); is it "
                             f"installed (`make harness`)? {tail[-1000:]}")
        return {"harness_exit_code": result.exit_code, "harness_timed_out": result.timed_out,
                "harness_output": tail, "requests": self._session.requests, "refused": self._session.refused}

    def _grade(self, harness: dict):
        obs, reward, terminated, truncated, info = self._swe.grade()
        self._done = True
        self._close_session()
        return obs, reward, terminated, truncated, {**info, **harness}

    def _truncate(self, why: str):
        """A cap: the harness gets no more replies; the actor records the workspace's change."""
        self._done = True
        books = {"requests": self._session.requests, "refused": self._session.refused}
        self._close_session()  # stops the harness: its exit code and output are then known
        if "exec" in self._result:
            result: ExecResult = self._result["exec"]
            books.update(harness_exit_code=result.exit_code, harness_output=result.output[-OUTPUT_TAIL_CHARS:])
        return f"truncated: {why}", 0.0, False, True, {"outcome": Outcome.TRUNCATED.value, "truncated": why, **books}

    def _close_session(self) -> None:
        self._pending = None
        if self._session is not None:
            self._gateway.close_session(self._session)
            self._session = None
        if self._thread is not None and self._thread.is_alive():
            # A cap ended the episode under a running harness: it is stopped before anything else
            # runs in the sandbox (the change's capture, the next episode).
            self._stop_file.touch()
            self._thread.join(timeout=STOP_WAIT_S)
            if self._thread.is_alive():
                raise InfraError(InfraSource.SANDBOX, f"the harness outlived its stop by {STOP_WAIT_S:g} s")
        if self._stop_file is not None:
            self._stop_file.unlink(missing_ok=True)


def _stoppable(command: str, sid: str) -> str:
    """The harness in a process group of its own, ended when the host drops `stop-<sid>` into the
    lease's gateway folder (read-only inside, so only the host can)."""
    stop = f"{GATEWAY_MOUNT}/stop-{sid}"
    return "\n".join([
        f"setsid bash -c {shlex.quote(command)} &",
        "h=$!",
        'while kill -0 "$h" 2>/dev/null; do',
        f'  if [ -e {stop} ]; then kill -TERM -- "-$h" 2>/dev/null; sleep {STOP_GRACE_S};'
        ' kill -KILL -- "-$h" 2>/dev/null; break; fi',
        "  sleep 0.2",
        "done",
        'wait "$h"',
    ])


def _parse_answer(action: str) -> tuple[int, dict]:
    try:
        answer = json.loads(action)
        status, body = int(answer["status"]), answer["body"]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"a swerve/Harness-v0 action is JSON {{'status': int, 'body': dict}}; got {action[:200]!r}") \
            from error
    if not isinstance(body, dict):
        raise ValueError("a swerve/Harness-v0 action's body must be a JSON object")
    return status, body


def _new_messages_text(messages: list[dict]) -> str:
    """The messages after the last assistant turn, as the observation's text."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    return "\n\n".join(f"[{m.get('role')}] {m.get('content') or ''}" for m in messages[last + 1:])
