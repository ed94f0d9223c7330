"""What the container backends (docker, e2b) share: paths, the workspace upload, the deadline.

In a container the workspace is `sandbox.container_workdir`; at start it is filled (from the
image, or by uploading task.workspace_dir) and copied to a pristine twin that `reset`
restores. Commands run under coreutils `timeout`, which signals its whole process group,
so a command's children die with it even when the client-side connection is gone.
"""
from __future__ import annotations

import io
import posixpath
import shlex
import tarfile

from envs.jail.capture import TIMEOUT_EXIT_CODE

# Seconds the client waits past the in-container deadline before it kills from outside.
CLIENT_GRACE_S = 5.0
# Seconds between TERM and KILL when the in-container deadline passes.
KILL_AFTER_S = 1
# What commands see besides the image's own environment; never anything of the host.
CONTAINER_ENV = {"LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


def workspace_path(workdir: str, path: str) -> str:
    """Absolute container path of a workspace-relative path; refuses anything leading outside."""
    if posixpath.isabs(path) or not path:
        raise ValueError(f"path {path!r} must be relative to the workspace")
    normal = posixpath.normpath(path)
    if normal == ".." or normal.startswith("../"):
        raise ValueError(f"path {path!r} escapes the workspace")
    return posixpath.join(workdir, normal)


def pristine_path(workdir: str) -> str:
    return workdir.rstrip("/") + ".swerve-pristine"


def workspace_tarball(workspace_dir: str) -> bytes:
    """task.workspace_dir as a gzipped tar (modes and symlinks kept), members relative to it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(workspace_dir, arcname=".")
    return buffer.getvalue()


def scrub_history_script(workdir: str) -> str:
    """Shell that leaves a git workspace its files but none of its history: a repository checked
    out at a task's base commit still holds the fix in later commits, the reflog, ORIG_HEAD,
    stashes or packed objects. The scrubbed repository has one commit, the task's start."""
    wd = shlex.quote(workdir)
    return (f"if [ -e {wd}/.git ]; then cd {wd} && rm -rf .git && git init -q && git add -A && "
            "git -c user.name=swerve -c user.email=swerve@localhost -c commit.gpgsign=false "
            "commit -q --allow-empty --no-verify -m 'task start'; fi")


def fill_and_snapshot_script(workdir: str, tarball: str | None) -> str:
    """Shell run as root at start: unpack the upload (if any), drop version-control history,
    then keep a pristine copy."""
    wd = shlex.quote(workdir)
    steps = [f"mkdir -p {wd}"]
    if tarball is not None:
        steps.append(f"tar -xzf {shlex.quote(tarball)} -C {wd} && rm -f {shlex.quote(tarball)}")
    steps.append(f"( {scrub_history_script(workdir)} )")
    steps.append(snapshot_script(workdir))
    return " && ".join(steps)


def pristine_tree(workdir: str) -> str:
    """The pristine copy itself, inside pristine_path: that folder is root's alone (0700), and the
    copy keeps the workspace's own owner and mode, which a restore gives back to the workspace."""
    return pristine_path(workdir) + "/tree"


def snapshot_script(workdir: str) -> str:
    """Keep a pristine copy of the workspace where the agent (another user) can neither read nor
    write it, so neither reset nor grading can be steered by editing it."""
    wd, outer, tree = shlex.quote(workdir), shlex.quote(pristine_path(workdir)), shlex.quote(pristine_tree(workdir))
    return f"mkdir -p {outer} && chown 0:0 {outer} && chmod 700 {outer} && rm -rf {tree} && cp -a {wd} {tree}"


def restore_script(workdir: str) -> str:
    # The workspace's contents, not the folder: in a docker lease it is a volume's mount point.
    wd, tree = shlex.quote(workdir), shlex.quote(pristine_tree(workdir))
    return f"find {wd} -mindepth 1 -delete && cp -a {tree}/. {wd}/"


def with_deadline(command: str, timeout_s: float) -> str:
    """`command` under coreutils timeout (TERM, then KILL), exit code 124 when it fires."""
    return f"timeout -k {KILL_AFTER_S} {timeout_s:.3f} bash -c {shlex.quote(command)}"


def deadline_fired(exit_code: int, duration_s: float, timeout_s: float) -> bool:
    """Whether a wrapped command ended because of its deadline (124, or 137 after -k)."""
    return exit_code in (TIMEOUT_EXIT_CODE, 128 + 9) and duration_s >= timeout_s * 0.95
