"""What the container backends (docker, e2b) share: paths, the workspace upload, the deadline.

In a container the workspace is `sandbox.container_workdir`; at start it is filled (from the
image, or by uploading task.workspace_dir) and copied to a pristine twin that `reset`
restores. Commands run under coreutils `timeout`, which signals its whole process group,
so a command's children die with it even when the client-side connection is gone.
"""
from __future__ import annotations

import base64
import io
import posixpath
import shlex
import tarfile

from envs.sandboxes.jail.capture import TIMEOUT_EXIT_CODE
from envs.outcomes import InfraError, InfraSource

# The workspace in a container when neither sandbox.container_workdir, the task nor its image
# names one (an image's WORKDIR of "/" names none).
DEFAULT_WORKDIR = "/workspace"
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


def fill_script(workdir: str, tarball: str | None) -> str:
    """Shell run as root at start: the workspace folder, and the upload unpacked into it (if any)."""
    wd = shlex.quote(workdir)
    steps = [f"mkdir -p {wd}"]
    if tarball is not None:
        steps.append(f"tar -xzf {shlex.quote(tarball)} -C {wd} && rm -f {shlex.quote(tarball)}")
    return " && ".join(steps)


def seal_script(workdir: str, owner: str = "") -> str:
    """Shell run as root once the workspace holds the task's start (after its setup): drop
    version-control history, hand the files to the agent's user (if one), keep a pristine copy."""
    steps = [f"( {scrub_history_script(workdir)} )"]
    if owner:
        steps.append(f"chown -R {shlex.quote(owner)} {shlex.quote(workdir)}")
    steps.append(snapshot_script(workdir))
    return " && ".join(steps)


# Where a task's setup writes its output (shown when it fails; /tmp is the lease's own tmpfs).
SETUP_LOG = "/tmp/.swerve-setup.log"
# What describes the shell or the user that ran the setup, not the environment it set up.
_SHELL_STATE = frozenset({"PWD", "OLDPWD", "SHLVL", "_", "HOME", "USER", "LOGNAME", "HOSTNAME", "MAIL"})


def setup_script(setup: tuple[str, ...]) -> str:
    """Shell for a task's setup commands (one shell, in order, stopping at the first that fails
    with its exit status and the tail of its output on stderr). Its stdout is two lines, the
    environment before and after (base64 of `env -0`, text-safe for every backend's client; see
    setup_env), since each later command is a new bash that would otherwise lose what setup
    activated."""
    log = shlex.quote(SETUP_LOG)
    # The trap also reports a setup command that calls `exit` itself.
    on_exit = f's=$?; exec 1>&3 2>&4; if [ "$s" -ne 0 ]; then tail -c 2000 {log} >&2; fi; rm -f {log}; exit "$s"'
    lines = ["env -0 | base64 -w 0; echo", f"exec 3>&1 4>&2 >{log} 2>&1", f"trap {shlex.quote(on_exit)} EXIT"]
    for command in setup:
        lines += [command, 's=$?; if [ "$s" -ne 0 ]; then exit "$s"; fi']
    return "\n".join([*lines, f"trap - EXIT; exec 1>&3 2>&4; rm -f {log}", "env -0 | base64 -w 0; echo"]) + "\n"


def setup_env(output: str) -> dict[str, str]:
    """The variables setup_script's run set or changed (a conda env's PATH and CONDA_*)."""
    listings = output.split()
    if len(listings) != 2:
        raise InfraError(InfraSource.SANDBOX, f"a task's setup printed {len(listings)} environment listings, not 2 "
                                              f"(its stdout, cut: {output[:200]!r})")

    def parse(listing: str) -> dict[str, str]:
        entries = base64.b64decode(listing).split(b"\0")
        pairs = (entry.decode("utf-8", errors="replace").partition("=") for entry in entries if entry)
        return {key: value for key, _, value in pairs}

    old, new = parse(listings[0]), parse(listings[1])
    return {key: value for key, value in new.items() if old.get(key) != value and key not in _SHELL_STATE}


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
