"""Per-lease cgroups: one pids and memory limit over everything a lease runs, and a sure kill.

As root, RLIMIT_NPROC is not enforced, so only a cgroup contains a fork bomb. A lease
creates its cgroup under this process's own cgroup (v1: one directory per controller;
v2: one directory in the unified tree), each command joins it before it execs, and
`kill_all` ends every process in it, including those that left the process group.
"""
from __future__ import annotations

import logging
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
NAME_PREFIX = "swerve-"
_V1_CONTROLLERS = ("pids", "memory", "freezer")
_KILL_PASSES = 50


def _own_paths() -> Dict[str, str]:
    """controller ('' for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths = {}
    with open("/proc/self/cgroup") as handle:
        for line in handle:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LeaseCgroup:
    """A cgroup for one lease. Create with `LeaseCgroup.create`; raises OSError when impossible."""

    def __init__(self, dirs: Dict[str, Path], version: int):
        self.dirs = dirs  # controller ("unified" for v2) -> directory
        self.version = version

    @classmethod
    def create(cls, memory_bytes: Optional[int], max_pids: Optional[int], role: str = "lease") -> "LeaseCgroup":
        """A cgroup named after this process (so that a sweep knows when its owner is gone);
        None limits leave that controller unlimited (a jail's own cgroup only holds it to kill it)."""
        name = f"{NAME_PREFIX}{os.getpid()}-{role}-{uuid.uuid4().hex[:10]}"
        if (CGROUP_ROOT / "cgroup.controllers").exists():
            return cls._create_v2(name, memory_bytes, max_pids)
        return cls._create_v1(name, memory_bytes, max_pids)

    @classmethod
    def _create_v1(cls, name: str, memory_bytes: Optional[int], max_pids: Optional[int]) -> "LeaseCgroup":
        own = _own_paths()
        parents = {}
        for controller in _V1_CONTROLLERS:
            mount = CGROUP_ROOT / controller
            if controller in own and (mount / "cgroup.procs").exists():
                parents[controller] = mount / own[controller].lstrip("/")
        missing = [c for c in ("pids", "memory") if c not in parents]
        if missing:
            raise OSError(f"cgroup v1 controllers not mounted: {missing}")
        made = cls({}, version=1)
        try:
            for controller, parent in parents.items():
                _sweep_stale(parent)
                path = parent / name
                path.mkdir()
                made.dirs[controller] = path
            if max_pids is not None:
                _write(made.dirs["pids"] / "pids.max", str(max_pids))
            if memory_bytes is not None:
                _write(made.dirs["memory"] / "memory.limit_in_bytes", str(memory_bytes))
                memsw = made.dirs["memory"] / "memory.memsw.limit_in_bytes"
                if memsw.exists():
                    _write(memsw, str(memory_bytes))  # swap must not bypass the limit
        except OSError:
            made.remove()
            raise
        return made

    @classmethod
    def _create_v2(cls, name: str, memory_bytes: Optional[int], max_pids: Optional[int]) -> "LeaseCgroup":
        parent = CGROUP_ROOT / _own_paths().get("", "/").lstrip("/")
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        wanted = [c for c in ("pids", "memory") if c not in enabled]
        if wanted:
            # Fails (EBUSY) when the parent holds processes itself: then cgroups stay off.
            _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
        _sweep_stale(parent)
        made = cls({"unified": parent / name}, version=2)
        try:
            made.dirs["unified"].mkdir()
            if max_pids is not None:
                _write(made.dirs["unified"] / "pids.max", str(max_pids))
            if memory_bytes is not None:
                _write(made.dirs["unified"] / "memory.max", str(memory_bytes))
                swap = made.dirs["unified"] / "memory.swap.max"
                if swap.exists():
                    _write(swap, "0")
        except OSError:
            made.remove()
            raise
        return made

    @property
    def procs_files(self) -> List[str]:
        """The cgroup.procs files a process writes its pid to in order to join."""
        return [str(path / "cgroup.procs") for path in self.dirs.values()]

    @property
    def _main(self) -> Path:
        return self.dirs.get("pids") or self.dirs.get("unified") or next(iter(self.dirs.values()))

    def pids(self) -> List[int]:
        try:
            text = (self._main / "cgroup.procs").read_text()
        except FileNotFoundError:
            return []
        return [int(line) for line in text.split()]

    def read(self, filename: str) -> str:
        """A control file of this cgroup, e.g. 'memory.failcnt' or 'pids.max'."""
        for path in self.dirs.values():
            if (path / filename).exists():
                return (path / filename).read_text().strip()
        raise FileNotFoundError(filename)

    def kill_all(self, timeout_s: float = 5.0) -> bool:
        """SIGKILL every process in the cgroup; True once it is empty."""
        if not self.pids():
            return True
        unified = self.dirs.get("unified")
        if unified is not None and (unified / "cgroup.kill").exists():
            _write(unified / "cgroup.kill", "1")
        else:
            freezer = self.dirs.get("freezer")
            # Frozen processes cannot fork, so one pass of kills reaches all of them.
            frozen = freezer is not None and _try_write(freezer / "freezer.state", "FROZEN")
            try:
                for _ in range(_KILL_PASSES):
                    pids = self.pids()
                    if not pids:
                        break
                    for pid in pids:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            continue
            finally:
                if frozen:
                    _try_write(freezer / "freezer.state", "THAWED")
        deadline_s = time.monotonic() + timeout_s
        while self.pids():
            if time.monotonic() > deadline_s:
                log.warning("cgroup %s still has processes after SIGKILL", self._main)
                return False
            time.sleep(0.01)
        return True

    def remove(self) -> None:
        """Kill what is left and delete the cgroup directories; safe to call twice."""
        if self.dirs:
            self.kill_all()
        for controller, path in list(self.dirs.items()):
            for _ in range(100):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY while the last exits are accounted
                    time.sleep(0.01)
            else:
                log.warning("cannot remove cgroup %s", path)
                continue
            del self.dirs[controller]


def _try_write(path: Path, value: str) -> bool:
    try:
        _write(path, value)
        return True
    except OSError:
        return False


def _thaw(cgroup_dir: Path) -> None:
    """A SIGKILL stays pending while the cgroup is frozen (its owner died between freezing and
    killing the lease), so thaw it: the processes then die and the directory can go."""
    for name, value in (("freezer.state", "THAWED"), ("cgroup.freeze", "0")):
        # Another process's sweep may remove the directory meanwhile (ENOENT, or ENODEV for a
        # write into a removed cgroup): that is no reason to refuse the lease being created.
        if (cgroup_dir / name).exists():
            _try_write(cgroup_dir / name, value)


def _sweep_stale(parent: Path) -> None:
    """Remove lease cgroups left by a process that died without closing its leases."""
    try:
        entries = list(parent.iterdir())
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(NAME_PREFIX) or not entry.is_dir():
            continue
        owner = entry.name[len(NAME_PREFIX):].split("-", 1)[0]
        if owner.isdigit() and not pid_alive(int(owner)):
            stale = LeaseCgroup({"stale": entry}, version=0)
            for pid in stale.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue  # exited between listing and kill
            _thaw(entry)
            # The killed are accounted a moment later: rmdir right away was EBUSY (and left the
            # directory to the next sweep), so wait for them as a lease's own close does.
            stale.remove()


def cgroups_unavailable_reason() -> Optional[str]:
    """None when a lease cgroup can be made here, else why not."""
    try:
        LeaseCgroup.create(64 * 1024 * 1024, 16).remove()
    except OSError as error:
        return f"cgroups unavailable: {error}"
    return None
