"""Local sandbox: a workspace copy per lease, commands isolated with bubblewrap.

Inside bwrap a command sees: read-only system directories and Python, the workspace
read-write at /workspace (its cwd), a private /tmp, its own /proc (pid namespace: no host
process, so no host environment), no network, uid 1000, and rlimits; of the host's home only
an interpreter prefix that lives there (pyenv, uv), never ~/.ssh or ~/.aws. Its environment
is clean_env(), nothing of the host's (no API keys).
A jailed lease also sees sandbox.ro_binds read-only at their own paths and its gateway folder
read-only at /run/swerve-gateway: an agent harness's one route out (envs/sandboxes/gateway_route.py).
Each lease also gets a cgroup (envs/sandboxes/cgroups.py) when the cgroup fs allows: pids.max and a
memory limit over all its processes, and a kill that reaches processes which left the
process group. Without one (no cgroup fs, not root) it degrades with a logged warning.
A jailed lease keeps one exec server in its jail (envs/sandboxes/exec_channel.py) that starts each
command as a fresh process (the jail itself: envs/sandboxes/jail_argv.py); a jail a command
left dirty (/tmp, /dev/shm, SysV IPC) is replaced
before the next command, and reset() always starts a fresh one, so grading never shares a
jail with the agent's commands.
What the agent leaves (any depth, path length, mode or count) is never walked by this process:
`rm -rf` (GNU: iterative) deletes it in the background (envs/sandboxes/tree_delete.py), after
reset() moved the workspace aside with one rename; close() waits for its lease's deletions
(bounded), interpreter exit for any left. A reset that fails discards what it moved aside.
sandbox.disk_mb bounds a lease's disk (envs/sandboxes/disk_quota.py): its own ext4 loop image where
this process may mount one (reset then makes a fresh file system), else measured after every
command. The jail's /tmp and /dev/shm are tmpfs of sandbox.tmpfs_mb each; the rest of /dev is
read-only.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, get_args

from configs.schema import SandboxCgroup, SandboxConfig, SandboxIsolation
from envs.sandboxes.cgroups import LeaseCgroup
from envs.sandboxes.exec_channel import ExecServer, ExecServerError, server_command
from envs.sandboxes.container_sandbox import scrub_history_script
from envs.sandboxes.disk_quota import (LEASE_PREFIX, LoopDisk, check_limits, lease_root, loop_unavailable_reason,
                                       mount_lease_disk, out_of_space, over_quota)
from envs.sandboxes.gateway_route import checked_ro_binds, make_gateway_dir
# clean_env and _python_dirs re-exported: callers and tests reach them through this module.
from envs.sandboxes.jail_argv import _JAIL_MOUNTS, _bwrap_argv, _python_dirs, clean_env  # noqa: F401
from envs.outcomes import InfraError, InfraSource
from envs.sandboxes.process import run_process
from envs.sandboxes.sandbox import ExecResult
# Re-exported: callers and tests reach the deleters through this module.
from envs.sandboxes.tree_delete import CLOSE_WAIT_S, _reap_deleters, discard_tree, wait_for_deleters  # noqa: F401
from envs.tasks.task import Task

log = logging.getLogger(__name__)

# Checked here too: a SandboxConfig built in code never went through the config loader.
ISOLATION_MODES = get_args(SandboxIsolation)
CGROUP_MODES = get_args(SandboxCgroup)
_MIB = 1024 * 1024
_warned_unisolated = False
_warned_no_cgroup = False
# Joins the cgroups named before "--" (by writing its pid to their cgroup.procs), then execs the rest.
_JOIN_CGROUP = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


class LocalSandbox:
    runs_images = False

    def __init__(self, config: SandboxConfig):
        if config.isolation not in ISOLATION_MODES:
            raise ValueError(f"sandbox.isolation={config.isolation!r}; allowed: {list(ISOLATION_MODES)}")
        if config.cgroup not in CGROUP_MODES:
            raise ValueError(f"sandbox.cgroup={config.cgroup!r}; allowed: {list(CGROUP_MODES)}")
        check_limits(config.disk_mb, config.tmpfs_mb)
        self.config = config
        self._root = lease_root(config.workdir_root)
        # Why a lease cannot have its own loop image here (None: it can); then the quota is counted.
        self._no_loop_disk = loop_unavailable_reason() if config.disk_mb else None
        self._disk: Optional[LoopDisk] = None
        self._bwrap = shutil.which("bwrap")
        if config.isolation == "bwrap" and self._bwrap is None:
            raise InfraError(
                InfraSource.SANDBOX,
                "sandbox.isolation='bwrap' but bubblewrap is not installed (apt-get install bubblewrap)",
            )
        self.isolated = config.isolation != "none" and self._bwrap is not None
        self._bash = shutil.which("bash") or "/bin/bash"
        self._prlimit = shutil.which("prlimit")
        if self._prlimit is None:
            raise InfraError(InfraSource.SANDBOX, "prlimit (util-linux) is required for sandbox rlimits")
        self._task: Optional[Task] = None
        self._lease_dir: Optional[Path] = None
        self._ro_binds: List[str] = []
        self._cgroup: Optional[LeaseCgroup] = None
        # The jail's own cgroup (bwrap and its server; no limits): the one sure way to end a jail
        # whose processes were stopped before bwrap set their parent-death signal, and the way a
        # later lease's sweep ends the jails of an owner that was SIGKILLed.
        self._jail_cgroup: Optional[LeaseCgroup] = None
        self._server: Optional[ExecServer] = None
        # Background deletions of this lease's used workspaces and, once closed, of the lease.
        self._deleters: List[subprocess.Popen] = []
        self._sh = shutil.which("sh") or "/bin/sh"
        # Seconds the last start() took, from request to a sandbox that ran its probe command.
        self.last_start_s: float = 0.0

    @property
    def workspace(self) -> Path:
        if self._lease_dir is None:
            raise InfraError(InfraSource.SANDBOX, "no open lease: call start(task) first")
        return self._lease_dir / "workspace"

    def start(self, task: Task) -> None:
        started_s = time.monotonic()
        self.close()
        self._warn_if_unisolated()
        self._ro_binds = checked_ro_binds(self.config.ro_binds, _JAIL_MOUNTS, ("/tmp", self._root))
        try:
            self._lease_dir = Path(tempfile.mkdtemp(prefix=LEASE_PREFIX, dir=self._root))
            self._task = task
            make_gateway_dir(self._lease_dir)
            self._disk = self._make_disk()
            self._copy_workspace()
        except OSError as error:
            self.close()
            raise InfraError(InfraSource.SANDBOX, f"cannot create workspace for {task.id}: {error}") from error
        if self.config.cgroup != "off":
            self._cgroup = self._make_cgroup("lease", self.config.memory_mb * _MIB, self.config.max_processes,
                                             "fork bombs and total memory are not contained")
        if self._cgroup is not None and self.isolated:
            self._jail_cgroup = self._make_cgroup("jail", None, None, "a stopped jail may outlive a killed owner")
        probe = self.exec("true")
        if probe.exit_code != 0:
            raise InfraError(InfraSource.SANDBOX, f"sandbox probe failed ({probe.exit_code}): {probe.output[-2000:]}")
        self.last_start_s = time.monotonic() - started_s

    def exec(self, command: str, timeout_s: float | None = None) -> ExecResult:
        if timeout_s is None:
            timeout_s = self.config.command_timeout_s
        result = self._exec_jailed(command, timeout_s) if self.isolated else self._exec_unjailed(command, timeout_s)
        if self.config.disk_mb and self._disk is None:
            return self._enforce_counted_quota(result)
        return result

    def _enforce_counted_quota(self, result: ExecResult) -> ExecResult:
        """Without a loop image: a workspace over sandbox.disk_mb after a command is put back to the
        task's initial state before it fills the host further, and the command says so (its exit
        code made non-zero): the agent's own outcome, its episode goes on."""
        over = over_quota(self.workspace, self.config.disk_mb)
        if not over:
            return result
        self.reset()
        notice = f"\n[sandbox] the workspace {over}: it was put back to the task's initial state"
        return dataclasses.replace(result, exit_code=result.exit_code or 1, output=result.output + notice)

    def _exec_jailed(self, command: str, timeout_s: float) -> ExecResult:
        try:
            server = self._server or self._start_server()
            fields = server.run(command, timeout_s, self.config.max_output_bytes)
        except (OSError, ExecServerError) as error:
            self._stop_server()
            raise InfraError(InfraSource.SANDBOX, f"exec server: {error}") from error
        finally:
            if self._cgroup is not None:
                self._cgroup.kill_all()  # the server killed them all already; this makes sure
        # /dev/shm is a mount of its own (to bound its size), which the server's check does not enter.
        if not fields.pop("clean") or server.holds_files_in("/dev/shm"):
            self._stop_server()  # the next command gets a fresh /tmp and /dev
        return ExecResult(**fields, timeout_s=timeout_s)

    def _limits(self) -> List[str]:
        return [self._prlimit, f"--as={self.config.memory_mb * _MIB}", f"--nproc={self.config.max_processes}",
                f"--fsize={self.config.max_file_mb * _MIB}", "--"]

    def _start_server(self) -> ExecServer:
        jail = _bwrap_argv(self._bwrap, str(self.workspace), str(self._lease_dir / "gateway"), self._ro_binds,
                           self.config.tmpfs_mb * _MIB)
        argv = [*self._limits(), *jail, *server_command(sys.executable, self._bash)]
        if self._jail_cgroup is not None:
            argv = [self._sh, "-c", _JOIN_CGROUP, "sh", *self._jail_cgroup.procs_files, "--", *argv]
        procs = self._cgroup.procs_files if self._cgroup is not None else []
        self._server = ExecServer(argv, clean_env(), str(self.workspace), procs, self._lease_dir / "exec-server.log")
        return self._server

    def _stop_server(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._jail_cgroup is not None:
            self._jail_cgroup.kill_all()  # what stop() could not reach: stopped, or out of bwrap's tree

    def _exec_unjailed(self, command: str, timeout_s: float) -> ExecResult:
        workspace = str(self.workspace)
        argv = [*self._limits(), self._bash, "-c", command]
        if self._cgroup is not None:
            argv = [self._sh, "-c", _JOIN_CGROUP, "sh", *self._cgroup.procs_files, "--", *argv]
        try:
            return run_process(argv, clean_env(), workspace, timeout_s, self.config.max_output_bytes)
        except OSError as error:
            raise InfraError(InfraSource.SANDBOX, f"cannot run command: {error}") from error
        finally:
            if self._cgroup is not None:
                # Nothing outlives its command, not even what left the process group (setsid).
                self._cgroup.kill_all()

    def read_files(self, paths: Sequence[str]) -> Dict[str, str]:
        return {path: self._resolve(path).read_text(encoding="utf-8", errors="replace") for path in paths}

    def write_files(self, files: Mapping[str, str]) -> None:
        for path, content in files.items():
            target = self._resolve(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")

    def reset(self) -> None:
        self._stop_server()  # its jail binds the workspace directory that is replaced here
        if self._disk is not None:
            try:
                self._disk.wipe()
                self._copy_workspace()
            except OSError as error:
                raise InfraError(InfraSource.SANDBOX, f"cannot renew the workspace of {self._task.id}: {error}") from error
            return
        workspace = self.workspace
        trash = self._lease_dir.with_name(f"{self._lease_dir.name}.trash-{uuid.uuid4().hex[:8]}")
        try:
            if stat.S_ISDIR(os.lstat(workspace).st_mode):
                os.chmod(workspace, 0o700)  # moving a folder to another parent needs its write bit
            os.rename(workspace, trash)
        except FileNotFoundError:
            trash = None  # an unjailed command removed the workspace itself
        except OSError as error:
            raise InfraError(InfraSource.SANDBOX, f"cannot move the used workspace aside: {error}") from error
        try:
            self._copy_workspace()
        except OSError as error:
            # What was moved aside is no longer the lease's: left, it would stay on disk forever
            # (the partial copy goes with the lease folder when the caller closes it).
            if trash is not None:
                self._discard(trash)
            raise InfraError(InfraSource.SANDBOX, f"cannot copy the workspace of {self._task.id}: {error}") from error
        if trash is not None:
            self._discard(trash)

    def gateway_dir(self) -> Optional[Path]:
        """The lease's gateway folder (envs/sandboxes/gateway_route.py); None unjailed, where the harness
        would share the host's network and no route could be the only one."""
        if self._lease_dir is None:
            raise InfraError(InfraSource.SANDBOX, "no open lease: call start(task) first")
        return self._lease_dir / "gateway" if self.isolated else None

    @property
    def cgroup(self) -> Optional[LeaseCgroup]:
        """The lease's cgroup, None when cgroups are off or unavailable."""
        return self._cgroup

    @property
    def jail_cgroup(self) -> Optional[LeaseCgroup]:
        """The cgroup of the jail itself (bwrap and its exec server), None when there is none."""
        return self._jail_cgroup

    def close(self) -> None:
        self._stop_server()
        for cgroup in (self._jail_cgroup, self._cgroup):
            if cgroup is not None:
                cgroup.remove()
        self._jail_cgroup = self._cgroup = None
        if self._disk is not None:
            try:
                self._disk.remove()
            except OSError as error:
                # The lease folder is deleted below regardless (rm crosses into a mount still there).
                log.error("cannot unmount the workspace image of %s: %s", self._lease_dir, error)
            self._disk = None
        if self._lease_dir is not None:
            self._discard(self._lease_dir)
        self._lease_dir = None
        deleters, self._deleters = self._deleters, []
        left = _reap_deleters(CLOSE_WAIT_S, only=deleters)
        if left:
            log.warning("still deleting after %.0f s, left to finish in the background: %s", CLOSE_WAIT_S, left)
        self._task = None

    def _discard(self, path: Path) -> None:
        try:
            deleter = discard_tree(path)
            if deleter is not None:
                self._deleters.append(deleter)
        except OSError as error:
            # The lease goes on regardless: a tree left on disk costs space, not correctness.
            log.error("cannot delete %s (it stays on disk): %s", path, error)

    def _make_cgroup(self, role: str, memory_bytes: Optional[int], max_pids: Optional[int],
                     lacking: str) -> Optional[LeaseCgroup]:
        global _warned_no_cgroup
        try:
            return LeaseCgroup.create(memory_bytes, max_pids, role)
        except OSError as error:
            if self.config.cgroup == "required":
                self.close()
                raise InfraError(InfraSource.SANDBOX, f"sandbox.cgroup='required' but {error}") from error
            if not _warned_no_cgroup:
                _warned_no_cgroup = True
                log.warning("no per-%s cgroup (%s): %s", role, error, lacking)
            return None

    def _make_disk(self) -> Optional[LoopDisk]:
        """The lease's own file system of sandbox.disk_mb, mounted at its workspace; None without a
        quota, or where none can be mounted (then the quota is counted, with one logged warning)."""
        if not self.config.disk_mb:
            return None
        return mount_lease_disk(self._lease_dir, self.workspace, self.config.disk_mb, self._no_loop_disk)

    def _copy_workspace(self) -> None:
        try:
            # A loop image's workspace is its mount point, there already.
            shutil.copytree(self._task.workspace_dir, self.workspace, symlinks=True, dirs_exist_ok=self._disk is not None)
        except OSError as error:
            if self._disk is None or not out_of_space(error):
                raise
            raise OSError(f"the task's files do not fit sandbox.disk_mb={self.config.disk_mb} (raise it): "
                          f"{str(error)[:500]}") from error
        if self.config.disk_mb and self._disk is None:
            over = over_quota(self.workspace, self.config.disk_mb)
            if over:
                raise OSError(f"the task's files do not fit sandbox.disk_mb={self.config.disk_mb} (raise it): they {over}")
        if (self.workspace / ".git").exists():
            # No answer in reach: the copy keeps the files, not the history (the fix may be in it).
            scrub = run_process([self._bash, "-c", scrub_history_script(str(self.workspace))], clean_env(), "/",
                                120.0, self.config.max_output_bytes)
            if scrub.exit_code != 0:
                raise OSError(f"cannot drop the git history of the workspace copy: {scrub.output[-500:]}")

    def _resolve(self, path: str) -> Path:
        """Host path of a workspace-relative path; refuses anything that leads outside."""
        if os.path.isabs(path):
            raise ValueError(f"path {path!r} must be relative to the workspace")
        root = self.workspace.resolve()
        target = (root / path).resolve()
        if target != root and root not in target.parents:
            raise ValueError(f"path {path!r} escapes the workspace")
        return target

    def _warn_if_unisolated(self) -> None:
        global _warned_unisolated
        if not self.isolated and not _warned_unisolated:
            _warned_unisolated = True
            log.warning("sandbox isolation is off: commands run directly on this host and can read its files "
                        "and other processes' environments, secrets included (install bubblewrap)")
