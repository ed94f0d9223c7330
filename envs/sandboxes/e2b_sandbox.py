"""E2B backend: one E2B sandbox (a microVM) per lease, through the official `e2b` SDK.

The template is task.image, else sandbox.e2b_template. Commands run as root in
sandbox.container_workdir under an in-sandbox deadline; a non-zero exit, which the SDK
raises as CommandExitException, becomes an ExecResult. The sandbox lives
sandbox.e2b_timeout_s seconds and each use renews that (set_timeout), so one whose owner
died expires shortly after; close() and interpreter exit kill it at once.

The API key is read by the SDK from E2B_API_KEY: this module never logs it and never puts it
(or anything else of the host environment) into the sandbox. With E2B_DEBUG=true the SDK
skips the cloud API and talks to envd at localhost:49983, or at E2B_SANDBOX_URL when set
(the tests run an in-process envd there).

No gateway route (gateway_dir() is None) and no sandbox.ro_binds: a cloud microVM can neither
have host folders bound into it nor reach this host's Unix sockets. How an agent harness would
reach its gateway session from here is written in envs/sandboxes/gateway_route.py.

Disk, memory and CPU are the template's (`e2b template build --cpu-count --memory-mb`, and the
disk its plan gives): sandbox.disk_mb and sandbox.tmpfs_mb are not enforced here. A full disk
fills that one microVM, never this host.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

from configs.schema import SandboxConfig
from envs.sandboxes.container_sandbox import (
    CLIENT_GRACE_S,
    CONTAINER_ENV,
    DEFAULT_WORKDIR,
    deadline_fired,
    fill_script,
    restore_script,
    seal_script,
    setup_env,
    setup_script,
    with_deadline,
    workspace_path,
    workspace_tarball,
)
from envs.outcomes import InfraError, InfraSource, LeaseLost
from envs.sandboxes.jail.capture import TIMEOUT_EXIT_CODE, CappedOutput
from envs.sandboxes.sandbox import ExecResult
from envs.tasks.task import Task

log = logging.getLogger(__name__)

_ROOT = "root"
_LIVE: "weakref.WeakSet[E2BSandbox]" = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


def _kill_live_sandboxes() -> None:
    """At interpreter exit: a lease dies with its owner."""
    with _LIVE_LOCK:
        boxes = list(_LIVE)
    for box in boxes:
        box.close()


atexit.register(_kill_live_sandboxes)


def _debug_mode() -> bool:
    return os.getenv("E2B_DEBUG", "false").lower() == "true"


class E2BSandbox:
    runs_images = True

    def __init__(self, config: SandboxConfig):
        if config.ro_binds:
            raise ValueError(f"sandbox.ro_binds={config.ro_binds} cannot be bound into an e2b sandbox (a cloud VM): "
                             "put those files in the template (task.image / sandbox.e2b_template), or use the local "
                             "or docker backend")
        self.config = config
        self.workdir = config.container_workdir or DEFAULT_WORKDIR
        self._box: Any = None
        self._task: Optional[Task] = None
        # What the task's setup left in the environment (an activated conda env), for every command.
        self._setup_env: dict[str, str] = {}
        self._renewed_s = 0.0
        self.last_start_s: float = 0.0

    @property
    def sandbox_id(self) -> Optional[str]:
        return None if self._box is None else self._box.sandbox_id

    def start(self, task: Task) -> None:
        started_s = time.monotonic()
        self.close()
        if not os.getenv("E2B_API_KEY") and not _debug_mode():
            raise InfraError(InfraSource.SANDBOX, "sandbox.backend='e2b' needs E2B_API_KEY in the environment")
        from e2b import Sandbox as E2BClient  # optional SDK: imported only by those who use the e2b backend

        template = task.image or self.config.e2b_template
        try:
            self._box = E2BClient.create(
                template=template,
                timeout=self.config.e2b_timeout_s,
                allow_internet_access=self.config.e2b_allow_internet,
                metadata={"owner": "swerve", "task": task.id},
            )
        except Exception as error:  # noqa: BLE001 - every SDK failure is an infra error
            raise InfraError(InfraSource.SANDBOX, f"e2b: cannot create a sandbox from {template!r}: {_describe(error)}") from error
        with _LIVE_LOCK:
            _LIVE.add(self)
        self._task = task
        self._renewed_s = time.monotonic()
        try:
            self._fill_workspace()
            probe = self.exec("true")
        except BaseException:
            self.close()
            raise
        if probe.exit_code != 0:
            self.close()
            raise InfraError(InfraSource.SANDBOX, f"e2b: sandbox probe failed ({probe.exit_code}): {probe.output[-2000:]}")
        self.last_start_s = time.monotonic() - started_s

    def exec(self, command: str, timeout_s: float | None = None) -> ExecResult:
        from e2b import CommandExitException, TimeoutException  # optional SDK (see start)

        box = self._lease()
        if timeout_s is None:
            timeout_s = self.config.command_timeout_s
        self._keep_alive()
        captured = CappedOutput(self.config.max_output_bytes)

        def take(text: str) -> None:
            captured.add(text.encode("utf-8", errors="replace"))

        started_s = time.monotonic()
        handle = None
        timed_out = False
        try:
            handle = box.commands.run(
                with_deadline(command, timeout_s),
                background=True,
                envs={**CONTAINER_ENV, **self._setup_env},
                user=_ROOT,
                cwd=self.workdir,
                timeout=timeout_s + CLIENT_GRACE_S,
                retain_output=False,
            )
            exit_code = handle.wait(on_stdout=take, on_stderr=take).exit_code
        except CommandExitException as error:
            exit_code = error.exit_code
        except TimeoutException:
            # The in-sandbox deadline did not end the stream: kill from outside.
            timed_out = True
            exit_code = TIMEOUT_EXIT_CODE
            if handle is not None:
                self._kill_quietly(handle)
        except Exception as error:  # noqa: BLE001
            raise InfraError(InfraSource.SANDBOX, f"e2b: command failed to run: {_describe(error)}") from error
        duration_s = time.monotonic() - started_s
        if not timed_out and deadline_fired(exit_code, duration_s, timeout_s):
            timed_out, exit_code = True, TIMEOUT_EXIT_CODE
        elif exit_code < 0:
            exit_code = 137  # envd reports a command ended by a signal as -1 ("signal: killed")
        return ExecResult(
            exit_code=exit_code,
            output=captured.text(),
            timed_out=timed_out,
            duration_s=duration_s,
            output_truncated=captured.dropped_bytes > 0,
            timeout_s=timeout_s,
        )

    def read_files(self, paths: Sequence[str]) -> Dict[str, str]:
        # envd reads one file per request; a batch saves the callers' round trips (the sandbox
        # actor's Ray calls), not envd's.
        return {path: self._read(path) for path in paths}

    def _read(self, path: str) -> str:
        target = workspace_path(self.workdir, path)
        try:
            data = self._lease().files.read(target, format="bytes", user=_ROOT)
        except Exception as error:  # noqa: BLE001
            raise InfraError(InfraSource.SANDBOX, f"e2b: cannot read {path!r}: {_describe(error)}") from error
        return bytes(data).decode("utf-8", errors="replace")

    def write_files(self, files: Mapping[str, str]) -> None:
        # One request per file, each naming its path as a query parameter: a multipart upload of
        # several names each by its part's filename, which servers may cut to a base name.
        for path, content in files.items():
            target = workspace_path(self.workdir, path)
            try:
                self._lease().files.write(target, content.encode("utf-8"), user=_ROOT)
            except Exception as error:  # noqa: BLE001
                raise InfraError(InfraSource.SANDBOX, f"e2b: cannot write {path!r}: {_describe(error)}") from error

    def reset(self) -> None:
        self._lease()  # no lease is the caller's error, never a reason to make one
        # A restore that what the agent left defeats raises; the grader then replaces the lease
        # (envs/grading/pristine_view.py) and the attempt scores 0.
        self._run_root(restore_script(self.workdir), "reset the workspace")

    def gateway_dir(self) -> Optional[Path]:
        """None: no host folder reaches a cloud VM (envs/sandboxes/gateway_route.py says what would)."""
        self._lease()
        return None

    def close(self) -> None:
        box, self._box = self._box, None
        self._task, self._setup_env = None, {}
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if box is None:
            return
        try:
            box.kill()
        except Exception as error:  # noqa: BLE001 - it expires on its own after e2b_timeout_s
            log.warning("e2b: killing sandbox %s failed (%s); it expires by itself", box.sandbox_id, _describe(error))

    # ---- internals -------------------------------------------------------------------------

    def _lease(self) -> Any:
        if self._box is None:
            raise InfraError(InfraSource.SANDBOX, "no open lease: call start(task) first")
        return self._box

    def _fill_workspace(self) -> None:
        upload = None
        if not self._task.image and self._task.workspace_dir:
            upload = self.workdir.rstrip("/") + ".swerve-upload.tar.gz"
            data = workspace_tarball(self._task.workspace_dir)
            try:
                self._lease().files.write(upload, data, user=_ROOT)
            except Exception as error:  # noqa: BLE001
                raise InfraError(InfraSource.SANDBOX, f"e2b: cannot upload the workspace: {_describe(error)}") from error
        fill, seal = fill_script(self.workdir, upload), seal_script(self.workdir)
        if not self._task.setup:
            self._run_root(f"{fill} && {seal}", "prepare the workspace", cwd="/")
            return
        self._run_root(fill, "prepare the workspace", cwd="/")
        self._setup_env = setup_env(self._run_root(setup_script(self._task.setup), f"run the setup of {self._task.id}",
                                                   cwd=self.workdir))
        self._run_root(seal, "snapshot the workspace", cwd="/")

    def _run_root(self, script: str, what: str, cwd: Optional[str] = None) -> str:
        """The script's stdout. A script that ran and failed or outlived its deadline is an
        InfraError that the grader's reset may blame on what the agent left; a sandbox that is gone
        (not found, stopped, unreachable) is LeaseLost, which it never blames on the agent."""
        from e2b import CommandExitException  # optional SDK (see start)
        from e2b.exceptions import (GuestUnresponsiveException, SandboxNotFoundException, SandboxNotRunningException,
                                    SandboxUnreachableException)

        try:
            return self._lease().commands.run(script, user=_ROOT, cwd=cwd or "/",
                                              timeout=self.config.command_timeout_s + 60).stdout
        except CommandExitException as error:
            raise InfraError(InfraSource.SANDBOX, f"e2b: cannot {what} ({error.exit_code}): {error.stderr}") from error
        except (SandboxNotFoundException, SandboxNotRunningException, SandboxUnreachableException,
                GuestUnresponsiveException) as error:
            raise LeaseLost(f"e2b: cannot {what}: the sandbox is gone: {_describe(error)}") from error
        except Exception as error:  # noqa: BLE001
            raise InfraError(InfraSource.SANDBOX, f"e2b: cannot {what}: {_describe(error)}") from error

    def _keep_alive(self) -> None:
        """Renew the sandbox lifetime while the lease is used (at most every third of it)."""
        if time.monotonic() - self._renewed_s < self.config.e2b_timeout_s / 3:
            return
        try:
            self._box.set_timeout(self.config.e2b_timeout_s)
            self._renewed_s = time.monotonic()
        except Exception as error:  # noqa: BLE001 - the next command tells whether it is gone
            log.warning("e2b: renewing sandbox %s failed: %s", self._box.sandbox_id, _describe(error))

    @staticmethod
    def _kill_quietly(handle: Any) -> None:
        try:
            handle.kill()
        except Exception as error:  # noqa: BLE001
            log.warning("e2b: killing a timed-out command failed: %s", _describe(error))


def _describe(error: BaseException) -> str:
    """An SDK error for a log line or message, with the API key blanked should it appear."""
    text = f"{type(error).__name__}: {error}"
    key = os.getenv("E2B_API_KEY")
    if key:
        text = text.replace(key, "***")
    return text[:2000]
