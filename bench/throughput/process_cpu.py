"""CPU-seconds of a run by kind of process: the driver, Ray's own daemons, each role's actors, the
engines' server processes, and what sandboxes run (the agents' commands, the tasks' tests).

    sampler = ProcessSampler(os.getpid())   # the run's driver: every process of the run descends from it
    sampler.sample()                        # -> {kind: CPU-seconds so far}, whenever a boundary is wanted

A process is read from /proc (psutil) while it lives; one that ends between two samples is still
counted, through the parent that reaped it (its `children_*` times), and only once: the parent's
children times minus what was already seen of the children that ended. Short-lived processes
(a test run, a shell command) are therefore attributed to the kind of the nearest ancestor that
lives long enough to be sampled, as "commands of <kind>".
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Optional

import psutil

# Ray sets its workers' process titles to "ray::<Class>.<method>" (or "ray::IDLE"); our role classes
# by that name. Anything else under Ray's raylet is Ray's own machinery.
ROLE_KINDS = {"EngineActor": "engine actors", "SimEngine": "engine actors", "TrainerShard": "trainer",
              "SampleCollector": "collector", "EvalQueue": "collector", "EpisodeActor": "episode actors",
              "SandboxActor": "sandbox actors"}
ENGINE_SERVER = "engine servers"
DRIVER = "driver"
RAY_SYSTEM = "ray system"
PROFILER = "profiler"
OTHER = "other"


def kind_of(title: str, cmdline: list[str], driver_pid: int, pid: int) -> Optional[str]:
    """A process's kind from its title and command line; None when only its ancestry can tell."""
    if pid == driver_pid:
        return DRIVER
    if title.startswith("ray::"):
        role = title[len("ray::"):].split(".", 1)[0].strip()
        return ROLE_KINDS.get(role, RAY_SYSTEM)
    joined = " ".join(cmdline)
    if "policies.server" in joined:
        return ENGINE_SERVER
    if "py-spy" in joined:
        return PROFILER
    if any(name in joined for name in ("raylet", "gcs_server", "dashboard", "log_monitor", "ray/_private",
                                       "ray/autoscaler", "runtime_env")):
        return RAY_SYSTEM
    return None


def commands_of(kind: str) -> str:
    return f"commands of {kind}"


@dataclass
class _Seen:
    ppid: int
    kind: str
    own_s: float  # user + system of the process itself
    children_s: float  # what it has reaped of its children (user + system)


@dataclass
class ProcessSampler:
    """Cumulative CPU-seconds by kind over every process descending from `root_pid` (and itself)."""
    root_pid: int
    totals: Dict[str, float] = field(default_factory=dict)
    _seen: Dict[int, _Seen] = field(default_factory=dict)
    _reaped_seen: Dict[int, float] = field(default_factory=dict)  # ppid -> totals of ended children seen

    def sample(self) -> Dict[str, float]:
        root = psutil.Process(self.root_pid)
        procs = [root, *root.children(recursive=True)]
        alive: Dict[int, _Seen] = {}
        kinds: Dict[int, str] = {}
        for proc in procs:  # parents come before their children in psutil's recursive walk
            try:
                with proc.oneshot():
                    ppid = proc.ppid()
                    cmdline = _cmdline(proc)
                    # Ray's titles live in argv (setproctitle); the kernel's name is cut at 15 characters.
                    kind = kind_of(cmdline[0] if cmdline else proc.name(), cmdline, self.root_pid, proc.pid)
                    times = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue  # ended while being read: its parent's children times will hold it
            if kind is None:
                parent = kinds.get(ppid, OTHER)
                kind = parent if parent.startswith("commands of ") else commands_of(parent)
            kinds[proc.pid] = kind
            alive[proc.pid] = _Seen(ppid, kind, times.user + times.system, times.children_user + times.children_system)
        # Ended since the last sample: what was seen of each is in its parent's children times
        # once the parent reaps it, with what was seen of its own ended children (handed up
        # first, deepest first, when a process and its children ended together).
        ended = {pid: seen for pid, seen in self._seen.items() if pid not in alive}
        for pid in sorted(ended, key=lambda p: -_depth(p, ended)):
            seen = ended[pid]
            handed = seen.own_s + seen.children_s + self._reaped_seen.pop(pid, 0.0)
            self._reaped_seen[seen.ppid] = self._reaped_seen.get(seen.ppid, 0.0) + handed
        for pid, seen in alive.items():
            before = self._seen.get(pid)
            own = seen.own_s - (before.own_s if before else 0.0)
            reaped = seen.children_s - (before.children_s if before else 0.0)
            already = self._reaped_seen.pop(pid, 0.0)
            unseen_children = max(0.0, reaped - already)  # what ended before it could be sampled
            self._add(seen.kind, own)
            self._add(seen.kind if seen.kind.startswith("commands of ") else commands_of(seen.kind), unseen_children)
        self._seen = alive
        return dict(self.totals)

    def pids_by_kind(self) -> Dict[str, list]:
        """The processes alive at the last sample, by kind."""
        out: Dict[str, list] = {}
        for pid, seen in list(self._seen.items()):
            out.setdefault(seen.kind, []).append(pid)
        return out

    def _add(self, kind: str, seconds: float) -> None:
        if seconds > 0:
            self.totals[kind] = self.totals.get(kind, 0.0) + seconds


def _depth(pid: int, ended: Dict[int, _Seen]) -> int:
    """How many ended ancestors `pid` has among `ended`."""
    depth = 0
    while ended[pid].ppid in ended and depth < len(ended):
        pid, depth = ended[pid].ppid, depth + 1
    return depth


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return []


def machine_busy_s() -> float:
    """CPU-seconds the whole machine has spent busy (all processes, ours or not) since boot."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0)


def cores() -> int:
    return len(os.sched_getaffinity(0))
