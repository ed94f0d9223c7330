"""Docker backend: one container per lease, driven through the docker CLI.

`docker run -d --network N --memory M --memory-swap M --pids-limit N --user U image
sleep infinity` holds the lease (N: sandbox.docker_network, "none" unless the run gives its
sandboxes a network, which only a task asking for one uses); commands are `docker exec` under an in-container deadline
(coreutils timeout kills the command's process group) and a client deadline behind it (the
CLI is killed, then every process but the container's init); files go through `docker cp`
as tar streams; `docker rm -f` ends the lease. sandbox.ro_binds and the lease's gateway folder
(a host folder of its own, envs/sandboxes/gateway_route.py) are bind mounts, read-only; they need the
daemon on this host. Containers carry labels naming their owner
process, so those of a dead owner on this host are removed by the next lease made here.
"""
from __future__ import annotations

import atexit
import io
import logging
import os
import posixpath
import shutil
import socket
import subprocess
import tarfile
import tempfile
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from configs.schema import SandboxConfig
from envs.sandboxes.cgroups import pid_alive
from envs.sandboxes.container_sandbox import (CLIENT_GRACE_S, CONTAINER_ENV, DEFAULT_WORKDIR, deadline_fired, fill_script, pristine_path,
                                    restore_script, seal_script, setup_env, setup_script, workspace_path)
from envs.sandboxes.gateway_route import GATEWAY_MOUNT, checked_ro_binds, make_gateway_dir
from envs.outcomes import InfraError, InfraSource, LeaseLost, TaskRefused
from envs.sandboxes.jail.capture import TIMEOUT_EXIT_CODE
from envs.sandboxes.process import run_process
from envs.sandboxes.sandbox import ExecResult, command_line_chunks
from envs.tasks.task import Task

log = logging.getLogger(__name__)

OWNER_LABEL = "swerve.owner"
HOST_LABEL = "swerve.host"
# Seconds a docker CLI call that is not a user command may take.
_LIVE: "weakref.WeakSet[DockerSandbox]" = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()
# One build per image tag at a time in this process (concurrent leases of one Harbor task).
_BUILD_LOCKS: dict[str, threading.Lock] = {}
_BUILD_TIMEOUT_S = 1800.0
# An image's WORKDIR by tag, read once per process (workdir_for): not a CLI call per lease start.
_IMAGE_WORKDIRS: dict[str, str] = {}
_swept = False


def _close_live_containers() -> None:
    """At interpreter exit: a lease dies with its owner."""
    with _LIVE_LOCK:
        boxes = list(_LIVE)
    for box in boxes:
        box.close()


atexit.register(_close_live_containers)


def cli_env() -> dict:
    """What the docker CLI needs of the host environment (never passed into containers)."""
    keep = ("PATH", "HOME", "XDG_RUNTIME_DIR")
    return {k: v for k, v in os.environ.items() if k in keep or k.startswith("DOCKER_")}


def ensure_image(docker: str, image: str, context: str, cli_timeout_s: float) -> None:
    """Build an image from its build context (a Harbor task's environment/ or tests/), once per
    tag and engine; offline, as the sandbox runs (--network none)."""
    with _BUILD_LOCKS.setdefault(image, threading.Lock()):
        if docker_cli([docker, "image", "inspect", image], f"inspect {image!r}", cli_timeout_s).returncode == 0:
            return
        built = docker_cli([docker, "build", "-q", "--network", "none", "--label", "swerve.cache=task-image",
                            "-t", image, context], f"build {image!r} from {context}", _BUILD_TIMEOUT_S)
        if built.returncode != 0:
            raise InfraError(InfraSource.SANDBOX, f"docker: cannot build {image!r} from {context}: "
                                                  f"{built.stderr.decode(errors='replace').strip()[-2000:]}")


def docker_cli(argv: List[str], what: str, timeout_s: float, stdin: Optional[bytes] = None) -> subprocess.CompletedProcess:
    """One docker CLI call, whatever its exit status; a CLI that cannot start or a daemon that
    does not answer in time is the sandbox's infra error, never a raw exception."""
    try:
        return subprocess.run(argv, input=stdin, capture_output=True, env=cli_env(), timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise InfraError(InfraSource.SANDBOX, f"docker: cannot {what}: {error}") from error


def _env_args(env: dict) -> List[str]:
    """`docker exec` flags that set these variables in the command (never the host's)."""
    return [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]


class DockerSandbox:
    runs_images = True

    def __init__(self, config: SandboxConfig):
        self.config = config
        # The lease's workspace: set at start (workdir_for), as the task and its image say.
        self.workdir = config.container_workdir or DEFAULT_WORKDIR
        self._docker = shutil.which("docker")
        if self._docker is None:
            raise InfraError(InfraSource.SANDBOX, "sandbox.backend='docker' but the docker CLI is not installed")
        self.container: Optional[str] = None
        self._task: Optional[Task] = None
        # What the task's setup left in the environment (an activated conda env), given to
        # every command of the lease.
        self._setup_env: dict[str, str] = {}
        # Host folder (mode 0700) holding the lease's gateway folder; removed with the lease.
        self._gateway_root: Optional[Path] = None
        self.last_start_s: float = 0.0

    def run_argv(self, image: str, name: str, scratch_dirs: tuple[str, ...] = (), gateway_dir: Optional[str] = None,
                 ro_binds: tuple[str, ...] = ()) -> List[str]:
        """The lease container: no network, capped memory (no swap), processes and file size, a
        read-only root file system. Writable: the workspace and its pristine twin (volumes
        labelled like the container, so nothing of a lease outlives it unnoticed) and /tmp (a
        tmpfs of sandbox.tmpfs_mb). sandbox.disk_mb is not enforced here: `--storage-opt size=`
        (overlay2 on xfs with pquota only) bounds the container's own layer, which is read-only,
        never the volumes, and the local volume driver has no size.
        Read-only binds: ro_binds at their own paths, gateway_dir at GATEWAY_MOUNT.
        Its init runs as root, so that set-up and reset can chown and restore; the agent's
        commands run as docker_user (exec --user) and, under no-new-privileges, cannot regain
        root through a setuid binary."""
        memory = f"{self.config.memory_mb}m"
        # tmpfs is memory: bounded apart from the container's limit, as the local jail's /tmp is.
        tmpfs_size = f"size={self.config.tmpfs_mb}m"
        labels = [f"{OWNER_LABEL}={os.getpid()}", f"{HOST_LABEL}={socket.gethostname()}"]
        argv = [self._docker, "run", "-d", "--name", name, "--network", self.config.docker_network, "--memory", memory,
                "--memory-swap", memory, "--pids-limit", str(self.config.max_processes), "--init",
                "--ulimit", f"fsize={self.config.max_file_mb * 1024 * 1024}",
                "--security-opt", "no-new-privileges", "--read-only", "--tmpfs", f"/tmp:rw,nosuid,nodev,exec,{tmpfs_size}"]
        for path in scratch_dirs:  # where a Harbor verifier reads its tests and writes its reward
            argv += ["--tmpfs", f"{path}:rw,nosuid,nodev,mode=1777,{tmpfs_size}"]
        for label in labels:
            argv += ["--label", label]
        for path in (self.workdir, pristine_path(self.workdir)):
            argv += ["--mount", ",".join([f"type=volume,dst={path}", *(f"volume-label={label}" for label in labels)])]
        binds = [(path, path) for path in ro_binds] + ([(gateway_dir, GATEWAY_MOUNT)] if gateway_dir else [])
        for source, target in binds:
            if "," in source or "\n" in source:
                raise ValueError(f"sandbox.ro_binds: {source!r} holds a comma or newline, which docker --mount cannot take")
            argv += ["--mount", f"type=bind,src={source},dst={target},readonly"]
        return argv + ["--entrypoint", "sleep", image, "infinity"]

    def start(self, task: Task) -> None:
        started_s = time.monotonic()
        self.close()
        self._sweep_dead_owners()
        if task.network != "none" and self.config.docker_network == "none":
            raise TaskRefused(f"{task.id} asks for a network (network_mode='public') and this run's sandboxes have "
                              "none: set sandbox.docker_network (e.g. bridge) to allow it, or "
                              "network_mode='no-network' in its task.toml if it needs none")
        image = task.image or self.config.docker_image
        if task.build_context:
            self._ensure_image(image, task.build_context)
        self.workdir = self.workdir_for(task, image)
        mounts = (self.workdir, pristine_path(self.workdir), GATEWAY_MOUNT, "/proc", "/dev", "/sys", *task.scratch_dirs)
        lease_root = self.config.workdir_root or tempfile.gettempdir()  # where the gateway folders live
        ro_binds = tuple(checked_ro_binds(self.config.ro_binds, mounts, ("/tmp", lease_root)))
        name = f"swerve-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        with _LIVE_LOCK:
            _LIVE.add(self)
        self._task = task
        try:
            self._gateway_root = Path(tempfile.mkdtemp(prefix="swerve-gateway-", dir=self.config.workdir_root or None))
            gateway_dir = str(make_gateway_dir(self._gateway_root))
            created = self._cli(self.run_argv(image, name, task.scratch_dirs, gateway_dir, ro_binds),
                                f"start a container from {image!r}")
            self.container = created.strip().splitlines()[-1] if created.strip() else name
            self._fill_workspace()
            probe = self.exec("true")
            if probe.exit_code != 0:
                raise InfraError(InfraSource.SANDBOX, f"docker: sandbox probe failed ({probe.exit_code}): {probe.output[-2000:]}")
        except BaseException:
            self.close()
            raise
        self.last_start_s = time.monotonic() - started_s

    def exec(self, command: str, timeout_s: float | None = None) -> ExecResult:
        container = self._lease()
        if timeout_s is None:
            timeout_s = self.config.command_timeout_s
        argv = [self._docker, "exec", "-w", self.workdir]
        if self.config.docker_user:
            argv += ["--user", self.config.docker_user]
        argv += [*_env_args({**CONTAINER_ENV, **self._setup_env}), container,
                 "timeout", "-k", "1", f"{timeout_s:.3f}", "bash", "-c", command]
        try:
            result = run_process(argv, cli_env(), "/", timeout_s + CLIENT_GRACE_S, self.config.max_output_bytes)
        except OSError as error:
            raise InfraError(InfraSource.SANDBOX, f"docker: cannot run docker exec: {error}") from error
        if result.exit_code != 0 and not self._running(container):
            # The lease died under the command (killed, OOM of its init, the daemon): the
            # sandbox's fault, never the agent's, so the episode is re-run, not scored.
            self._gone(container, result.output)
        if not result.timed_out and deadline_fired(result.exit_code, result.duration_s, timeout_s):
            result.timed_out, result.exit_code = True, TIMEOUT_EXIT_CODE
        self._end_leftovers(container, result.timed_out)
        return result

    @staticmethod
    def _gone(container: str, output: str) -> None:
        last = (output.strip().splitlines() or ["-"])[-1][-300:]
        raise LeaseLost(f"docker: container {container[:12]} is gone (last output: {last})")

    def _running(self, container: str) -> bool:
        state = self._run([self._docker, "inspect", "-f", "{{.State.Running}}", container], "inspect the container")
        return state.returncode == 0 and state.stdout.strip() == b"true"

    def _ensure_image(self, image: str, context: str) -> None:
        ensure_image(self._docker, image, context, self.config.docker_cli_timeout_s)

    def workdir_for(self, task: Task, image: str) -> str:
        """sandbox.container_workdir when set (an override), else the task's own (Harbor's
        [environment] workdir), else its image's WORKDIR, else DEFAULT_WORKDIR. An image's
        WORKDIR of "/" is no workspace."""
        if self.config.container_workdir or task.workdir:
            return self.config.container_workdir or task.workdir
        if task.image:
            if image not in _IMAGE_WORKDIRS:  # once per image and process: every lease start needs it
                _IMAGE_WORKDIRS[image] = self._cli([self._docker, "image", "inspect", "-f", "{{.Config.WorkingDir}}",
                                                    image], f"read the WORKDIR of {image!r}").strip()
            found = _IMAGE_WORKDIRS[image]
            if found.startswith("/") and found.rstrip("/"):
                return found.rstrip("/")
        return DEFAULT_WORKDIR

    def _end_leftovers(self, container: str, timed_out: bool) -> None:
        """Nothing a command started outlives it (as in the local sandbox): `kill -9 -1` run as
        the agent's user ends every process of that user, never the root-owned lease process.
        When that cannot run (the pids limit is full: a fork bomb), or the agent runs as root,
        a timed-out command's leftovers go with a restart of the container; its volumes (the
        workspace) stay."""
        if self.config.docker_user:
            # bash's own kill: images need not have a kill binary; kill(-1) spares its caller.
            swept = self._run([self._docker, "exec", "--user", self.config.docker_user, container,
                               "bash", "-c", "kill -9 -1 2>/dev/null; exit 0"], "end the command's leftovers")
            if swept.returncode == 0:
                return
        elif not timed_out:
            return
        if not self._running(container):  # died since the command ended: never revived behind the episode
            self._gone(container, swept.stderr.decode(errors="replace") if self.config.docker_user else "")
        self._cli([self._docker, "restart", "-t", "0", container], "restart the container to end leftover processes")

    def read_files(self, paths: Sequence[str]) -> Dict[str, str]:
        """One `tar` in the container per PATHS_PER_COMMAND paths (root reads, as `docker cp` would;
        the agent's processes are gone by then, so nothing moves under it)."""
        wanted = {posixpath.relpath(workspace_path(self.workdir, path), self.workdir): path for path in paths}
        found: Dict[str, str] = {}
        for chunk in command_line_chunks(list(wanted)):
            data = self._cli_bytes([self._docker, "exec", "-u", "0", self._lease(), "tar", "-cf", "-", "-C", self.workdir,
                                    "--", *chunk], f"read {chunk[0]!r}" + (f" and {len(chunk) - 1} more" if len(chunk) > 1 else ""))
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                for member in tar:
                    if member.name not in wanted or wanted[member.name] in found:
                        continue
                    if not member.isfile():
                        raise ValueError(f"{wanted[member.name]!r} is not a regular file in the workspace")
                    found[wanted[member.name]] = tar.extractfile(member).read().decode("utf-8", errors="replace")
        return {path: found[path] for path in paths}

    def write_files(self, files: Mapping[str, str]) -> None:
        """One `mkdir -p` for their folders (as the agent's user, who owns what it made), then one
        `docker cp` of a tar of them all into the workspace."""
        if not files:
            return
        relative = {posixpath.relpath(workspace_path(self.workdir, path), self.workdir): content
                    for path, content in files.items()}
        folders = sorted({posixpath.join(self.workdir, posixpath.dirname(name)) for name in relative})
        for chunk in command_line_chunks(folders):
            self._cli([self._docker, "exec", self._lease(), "mkdir", "-p", "--", *chunk],
                      f"create the folders of {len(files)} files")
        uid, _, gid = (self.config.docker_user or "0:0").partition(":")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, content in relative.items():
                data = content.encode("utf-8")
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
                if uid.isdigit():
                    info.uid = int(uid)
                    info.gid = int(gid) if gid.isdigit() else int(uid)
                tar.addfile(info, io.BytesIO(data))
        self._cli([self._docker, "cp", "-", f"{self._lease()}:{self.workdir}"], f"write {len(files)} files",
                  stdin=buffer.getvalue())

    def reset(self) -> None:
        container = self._lease()  # no lease is the caller's error, never a reason to make one
        # A restore that what the agent left defeats raises; the grader then replaces the lease
        # (envs/grading/pristine_view.py) and the attempt scores 0; a container that died is no
        # restore the agent defeated (LeaseLost: re-run, never scored).
        try:
            self._root_sh(restore_script(self.workdir), "reset the workspace")
        except InfraError as error:
            if not self._running(container):
                self._gone(container, str(error))
            raise

    def gateway_dir(self) -> Optional[Path]:
        """The lease's gateway folder on this host (envs/sandboxes/gateway_route.py)."""
        self._lease()
        return self._gateway_root / "gateway"

    def close(self) -> None:
        container, self.container = self.container, None
        gateway_root, self._gateway_root = self._gateway_root, None
        self._task, self._setup_env = None, {}
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if container is not None:
            # -v: the lease's volumes (workspace, pristine twin) go with it.
            self._cli([self._docker, "rm", "-f", "-v", container], "remove the container", check=False)
        if gateway_root is not None:
            # Ours alone (a folder and a socket), after the container that bound it is gone.
            shutil.rmtree(gateway_root)

    # ---- internals -------------------------------------------------------------------------

    def _lease(self) -> str:
        if self.container is None:
            raise InfraError(InfraSource.SANDBOX, "no open lease: call start(task) first")
        return self.container

    def _fill_workspace(self) -> None:
        container = self._lease()
        self._root_sh(fill_script(self.workdir, None), "create the workspace")
        if not self._task.image and self._task.workspace_dir:
            source = os.path.join(self._task.workspace_dir, ".")
            self._cli([self._docker, "cp", source, f"{container}:{self.workdir}"], "upload the workspace")
        if self._task.setup:
            listing = self._cli([self._docker, "exec", "-u", "0", "-w", self.workdir, *_env_args(CONTAINER_ENV),
                                 container, "bash", "-c", setup_script(self._task.setup)],
                                f"run the setup of {self._task.id}")
            self._setup_env = setup_env(listing)
        self._root_sh(seal_script(self.workdir, self.config.docker_user), "snapshot the workspace")

    def _root_sh(self, script: str, what: str) -> None:
        self._cli([self._docker, "exec", "-u", "0", self._lease(), "sh", "-c", script], what)

    def _cli(self, argv: List[str], what: str, check: bool = True, stdin: Optional[bytes] = None,
             timeout_s: Optional[float] = None) -> str:
        return self._cli_bytes(argv, what, check, stdin, timeout_s).decode("utf-8", errors="replace")

    def _cli_bytes(self, argv: List[str], what: str, check: bool = True, stdin: Optional[bytes] = None,
                   timeout_s: Optional[float] = None) -> bytes:
        try:
            done = self._run(argv, what, stdin, timeout_s)
        except InfraError as error:
            if not check:
                log.warning("%s", error)
                return b""
            raise
        if done.returncode != 0:
            message = done.stderr.decode("utf-8", errors="replace").strip()[-2000:]
            if not check:
                log.warning("docker: cannot %s: %s", what, message)
                return done.stdout
            raise InfraError(InfraSource.SANDBOX, f"docker: cannot {what}: {message}")
        return done.stdout

    def _run(self, argv: List[str], what: str, stdin: Optional[bytes] = None,
             timeout_s: Optional[float] = None) -> subprocess.CompletedProcess:
        return docker_cli(argv, what, timeout_s or self.config.docker_cli_timeout_s, stdin)

    def _sweep_dead_owners(self) -> None:
        """Once per process: remove this host's lease containers whose owner process is gone."""
        global _swept
        if _swept:
            return
        _swept = True
        listing = self._cli(
            [self._docker, "ps", "-a", "--filter", f"label={HOST_LABEL}={socket.gethostname()}",
             "--format", f'{{{{.ID}}}} {{{{.Label "{OWNER_LABEL}"}}}}'],
            "list lease containers", check=False,
        )
        for line in listing.splitlines():
            cid, _, owner = line.partition(" ")
            if owner.isdigit() and not pid_alive(int(owner)):
                self._cli([self._docker, "rm", "-f", "-v", cid], "remove a dead owner's container", check=False)
