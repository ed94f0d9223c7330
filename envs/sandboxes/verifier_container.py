"""A Harbor task's separate verifier: a fresh container of its verifier image, made after the
episode, that receives the agent's artifacts and runs the task's test.sh (envs/grading/harbor_verifier.py).

It is driven through the docker CLI of this host, like the docker sandbox, with that sandbox's
limits (memory, processes, file size) and network (sandbox.docker_network); its root file system
is writable (a verifier may install what it needs), and it lives only while one attempt is
graded. It carries the lease labels, so one whose owner died is removed like a dead lease.
"""
from __future__ import annotations

import io
import os
import shlex
import shutil
import socket
import tarfile
import uuid
from typing import Optional

from configs.schema import SandboxConfig
from envs.sandboxes.container_sandbox import CLIENT_GRACE_S, KILL_AFTER_S
from envs.sandboxes.docker_sandbox import HOST_LABEL, OWNER_LABEL, cli_env, docker_cli, ensure_image
from envs.outcomes import InfraError, InfraSource
from envs.sandboxes.process import run_process
from envs.sandboxes.sandbox import ExecResult


class VerifierContainer:
    def __init__(self, config: SandboxConfig, image: str, build_context: str = ""):
        self.config = config
        self.image = image
        self.build_context = build_context
        self._docker = shutil.which("docker")
        if self._docker is None:
            raise InfraError(InfraSource.GRADER, "a separate Harbor verifier needs the docker CLI on the grading host")
        self.container: Optional[str] = None

    def __enter__(self) -> "VerifierContainer":
        if self.build_context:
            ensure_image(self._docker, self.image, self.build_context, self.config.docker_cli_timeout_s)
        memory = f"{self.config.memory_mb}m"
        argv = [self._docker, "run", "-d", "--name", f"swerve-verifier-{os.getpid()}-{uuid.uuid4().hex[:12]}",
                "--network", self.config.docker_network, "--memory", memory, "--memory-swap", memory,
                "--pids-limit", str(self.config.max_processes), "--init",
                "--ulimit", f"fsize={self.config.max_file_mb * 1024 * 1024}",
                "--label", f"{OWNER_LABEL}={os.getpid()}", "--label", f"{HOST_LABEL}={socket.gethostname()}",
                "--entrypoint", "sleep", self.image, "infinity"]
        self.container = self._cli(argv, f"start a verifier container from {self.image!r}").decode().strip()
        return self

    def __exit__(self, *_exc) -> None:
        container, self.container = self.container, None
        if container:
            docker_cli([self._docker, "rm", "-f", "-v", container], "remove the verifier container",
                       self.config.docker_cli_timeout_s)

    def put_tar(self, data: bytes, folder: str = "/") -> None:
        """Unpack a tar stream into the container at `folder` (created first), as docker cp does."""
        self.root_sh(f"mkdir -p {shlex.quote(folder)}")
        self._cli([self._docker, "cp", "-", f"{self._lease()}:{folder}"], f"copy files into {folder}", stdin=data)

    def root_sh(self, script: str) -> None:
        self._cli([self._docker, "exec", "-u", "0", self._lease(), "sh", "-c", script], f"run {script[:60]!r}")

    def exec(self, command: str, timeout_s: float, env: dict[str, str]) -> ExecResult:
        """test.sh's run, as the image's user, in its WORKDIR, under an in-container deadline."""
        argv = [self._docker, "exec", *[arg for key, value in env.items() for arg in ("-e", f"{key}={value}")],
                self._lease(), "timeout", "-k", str(KILL_AFTER_S), f"{timeout_s:.3f}", "bash", "-c", command]
        try:
            return run_process(argv, cli_env(), "/", timeout_s + CLIENT_GRACE_S, self.config.max_output_bytes)
        except OSError as error:
            raise InfraError(InfraSource.GRADER, f"docker: cannot run the verifier: {error}") from error

    def read(self, path: str, max_bytes: int) -> Optional[bytes]:
        """A regular file's bytes (at most max_bytes + 1 of them), None when there is none."""
        done = docker_cli([self._docker, "cp", f"{self._lease()}:{path}", "-"], f"read {path}",
                          self.config.docker_cli_timeout_s)
        if done.returncode != 0:
            return None
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
            member = tar.next()
            handle = tar.extractfile(member) if member is not None and member.isfile() else None
            return handle.read(max_bytes + 1) if handle is not None else None

    def _lease(self) -> str:
        if self.container is None:
            raise InfraError(InfraSource.GRADER, "the verifier container is not running")
        return self.container

    def _cli(self, argv: list[str], what: str, stdin: Optional[bytes] = None) -> bytes:
        done = docker_cli(argv, what, self.config.docker_cli_timeout_s, stdin)
        if done.returncode != 0:
            raise InfraError(InfraSource.GRADER, f"docker: cannot {what}: "
                                                 f"{done.stderr.decode(errors='replace').strip()[-2000:]}")
        return done.stdout
