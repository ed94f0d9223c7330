"""What a local lease's jail is made of: bubblewrap's argv and the environment a command sees
(envs/sandboxes/local_sandbox.py runs them)."""
from __future__ import annotations

import os
import sys
from typing import List

from envs.sandboxes.exec_channel import JAIL_CODE_DIR, JAIL_CODE_MOUNT
from envs.sandboxes.gateway_route import GATEWAY_MOUNT

SANDBOX_WORKSPACE = "/workspace"
SANDBOX_UID = 1000
_SYSTEM_DIRS = ("usr", "etc", "bin", "sbin", "lib", "lib64", "lib32")


def clean_env() -> dict:
    """The whole environment a command sees: nothing of the host's passes through."""
    return {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }


def _python_dirs() -> List[str]:
    """Interpreter and venv prefixes outside the system dirs, parents before children."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    prefixes.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    system = tuple(f"/{name}" for name in _SYSTEM_DIRS)
    kept = [p for p in prefixes if os.path.isdir(p) and not p.startswith(system)]
    return sorted(kept, key=len)


# Where the jail mounts something itself: no ro_bind may cover or enter these.
_JAIL_MOUNTS = (SANDBOX_WORKSPACE, JAIL_CODE_MOUNT, GATEWAY_MOUNT, "/proc", "/dev")


def _bwrap_argv(bwrap: str, workspace: str, gateway_dir: str, ro_binds: List[str], tmpfs_bytes: int) -> List[str]:
    argv = [bwrap, "--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    # The exec server is the namespace's pid 1: no reaper of bwrap's in between.
    argv += ["--die-with-parent", "--as-pid-1", "--hostname", "sandbox"]
    for name in _SYSTEM_DIRS:
        host = f"/{name}"
        if os.path.islink(host):
            argv += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            argv += ["--ro-bind", host, host]
    # The private /tmp comes before the Python binds: a venv may itself live under /tmp. The
    # memory-backed scratch space is bounded: /tmp and /dev/shm by size, the rest of /dev (bwrap's
    # own tmpfs, unbounded) read-only; device nodes stay usable on a read-only mount.
    argv += ["--size", str(tmpfs_bytes), "--tmpfs", "/tmp", "--dev", "/dev",
             "--size", str(tmpfs_bytes), "--tmpfs", "/dev/shm", "--remount-ro", "/dev", "--proc", "/proc"]
    for prefix in _python_dirs():
        argv += ["--ro-bind", prefix, prefix]
    for path in ro_binds:
        argv += ["--ro-bind", path, path]
    argv += ["--ro-bind", str(JAIL_CODE_DIR), JAIL_CODE_MOUNT, "--ro-bind", gateway_dir, GATEWAY_MOUNT]
    argv += ["--bind", workspace, SANDBOX_WORKSPACE, "--chdir", SANDBOX_WORKSPACE, "--remount-ro", "/"]
    return argv
