"""A Docker engine to run the container sandbox against, and the base image its tasks use.

`engine_reason()` says why no engine answers (None when one does). `start_engine()` starts
`dockerd` when none answers and this machine can run one (root, the binary installed: `make
docker`), and returns its pid, which only the caller stops (`stop_engine`). The base image is
built offline: `debootstrap` from the Debian mirror apt already uses, imported as
`swerve-base:<hash of the recipe>`, so a changed recipe builds a new one and an unchanged one
is built once per engine (kept between runs, like the venv; labelled `swerve.cache=base`).

    python -m envs.sandboxes.docker_engine base-image   # prints the tag, building it if missing (make docker)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional

# What the base image holds: Python 3.11 (also as `python`, which task test commands call),
# pytest and git (SWE-bench-style repositories), bash and coreutils (the sandbox's `timeout`).
# Part of the tag: change it and a new image is built.
BASE_RECIPE = {"suite": "bookworm", "variant": "minbase",
               "include": ["python3", "python-is-python3", "python3-pytest", "git"], "recipe": 1}
BASE_REPOSITORY = "swerve-base"
CACHE_LABEL = "swerve.cache"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
STATE_DIR = Path(os.environ.get("SWERVE_DOCKER_STATE", "~/.cache/swerve/docker")).expanduser()
# Seconds a started daemon may take to answer (measured: ~2 s).
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def _docker(*args: str, timeout_s: float = 60.0, stdin=None) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=stdin is None, timeout=timeout_s, stdin=stdin)


def engine_reason() -> Optional[str]:
    """None when a Docker engine answers, else why not."""
    if shutil.which("docker") is None:
        return "docker: the docker CLI is not installed (make docker)"
    try:
        done = _docker("info", "--format", "{{json .ServerVersion}}", timeout_s=20)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"docker: no Docker engine answers ({error})"
    if done.returncode != 0:
        return f"docker: no Docker engine answers ({done.stderr.strip().splitlines()[-1:] or ['docker info failed']})"
    return None


def start_engine() -> tuple[Optional[int], Optional[str]]:
    """(pid of a dockerd started here, None) when one had to be started, (None, None) when one
    already answers, (None, reason) when none answers and none can be started."""
    if engine_reason() is None:
        return None, None
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        return None, "docker: no engine answers and dockerd is not installed (make docker installs docker.io)"
    if os.geteuid() != 0:
        return None, "docker: no engine answers and starting dockerd needs root"
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    log = open(STATE_DIR / "dockerd.log", "ab")
    # No iptables and no bridge: every sandbox runs with --network none, so the daemon needs no
    # network set-up (and never makes one network per sandbox).
    proc = subprocess.Popen([dockerd, "--iptables=false", "--bridge=none", "--pidfile", str(STATE_DIR / "dockerd.pid")],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    while (reason := engine_reason()) is not None:
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_engine(proc.pid)
            tail = (STATE_DIR / "dockerd.log").read_text(errors="replace")[-1500:]
            return None, f"docker: dockerd did not start ({reason}); its log ends:\n{tail}"
        time.sleep(0.3)
    return proc.pid, None


def stop_engine(pid: int) -> None:
    """End the dockerd this process started (TERM, then KILL), and wait for it."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not our child: poll for its end
            done = 0 if _alive(pid) else pid
        if done == pid:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def base_image_tag() -> str:
    digest = hashlib.sha256(json.dumps(BASE_RECIPE, sort_keys=True).encode()).hexdigest()[:12]
    return f"{BASE_REPOSITORY}:{digest}"


def image_exists(tag: str) -> bool:
    return _docker("image", "inspect", tag, timeout_s=30).returncode == 0


def apt_mirror(etc_apt: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt uses on this machine (the only one reachable offline)."""
    for path in sorted(etc_apt.glob("sources.list.d/*.sources")):
        for line in path.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    sources = etc_apt / "sources.list"
    for line in sources.read_text().splitlines() if sources.exists() else []:
        parts = line.split()
        if parts[:1] == ["deb"] and "security" not in line:
            return parts[1]
    return DEFAULT_MIRROR


def ensure_base_image() -> str:
    """The base image's tag, built now if this engine does not have it."""
    tag = base_image_tag()
    if image_exists(tag):
        return tag
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise RuntimeError("building the base image needs debootstrap (make docker installs it)")
    with tempfile.TemporaryDirectory(prefix="swerve-rootfs-", dir="/var/tmp") as root:
        built = subprocess.run([debootstrap, f"--variant={BASE_RECIPE['variant']}",
                                f"--include={','.join(BASE_RECIPE['include'])}", BASE_RECIPE["suite"], root,
                                apt_mirror()], capture_output=True, text=True, timeout=1800)
        if built.returncode != 0:
            raise RuntimeError(f"debootstrap failed ({built.returncode}): {(built.stdout + built.stderr)[-2000:]}")
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        imported = _docker("import", "--change", f"LABEL {CACHE_LABEL}=base", "-", tag, timeout_s=600,
                           stdin=tar.stdout)
        tar.stdout.close()
        tar.wait()
    if imported.returncode != 0:
        raise RuntimeError(f"docker import failed: {imported.stderr.decode(errors='replace')[-2000:]}")
    return tag


def main(argv: Optional[list[str]] = None) -> int:
    """`base-image`: build the base image if this engine lacks it, starting a daemon for that when
    none answers (and stopping it after). `status`: whether an engine answers."""
    parser = argparse.ArgumentParser(prog="python -m envs.sandboxes.docker_engine", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("base-image", "status"))
    args = parser.parse_args(argv)
    if args.action == "status":
        print(engine_reason() or "docker: an engine answers")
        return 0 if engine_reason() is None else 1
    pid, reason = start_engine()
    if reason is not None:
        print(reason)
        return 1
    try:
        print(ensure_base_image())
    finally:
        if pid is not None:
            stop_engine(pid)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
