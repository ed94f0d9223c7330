"""Memory of a run by kind of process, at one moment (the kinds of bench/throughput/process_cpu.py:
the driver, Ray's own daemons, each role's actors, and "commands of <kind>" for what they run, a
sandbox's jail and exec server included).

    memory_by_kind(os.getpid())  # -> {kind: {"processes": n, "rss_mb": .., "pss_mb": .., "uss_mb": .., ...}}
    processes_by_kind(os.getpid())  # -> {kind: n}, without reading memory (cheap enough to poll)

RSS counts every page a process maps; PSS splits each shared page among its users (the kinds'
PSS add up to what the run holds); USS counts the pages only that process maps (what ending it
frees) and anon_mb its anonymous pages (heap and stacks: what another process of the same kind
costs again, while the code of Python and its libraries is shared through the page cache).
"""
from __future__ import annotations

from typing import Dict, Optional

from bench.throughput.process_cpu import ProcessSampler

# /proc/<pid>/smaps_rollup fields (kB) -> the figures reported (MB).
_FIELDS = {"Rss": "rss_mb", "Pss": "pss_mb", "Anonymous": "anon_mb"}
_PRIVATE = ("Private_Clean", "Private_Dirty")


def processes_by_kind(root_pid: int) -> Dict[str, int]:
    """How many processes of each kind descend from root_pid (and itself) now."""
    return {kind: len(pids) for kind, pids in _pids_by_kind(root_pid).items()}


def memory_by_kind(root_pid: int) -> Dict[str, dict]:
    """Sums over the processes alive now that descend from root_pid (and itself), by kind; a process
    that ends while being read is left out of its kind's count and figures."""
    out: Dict[str, dict] = {}
    for kind, pids in sorted(_pids_by_kind(root_pid).items()):
        read = [figures for figures in map(process_memory_mb, pids) if figures is not None]
        if not read:
            continue
        totals = {name: sum(figures[name] for figures in read) for name in (*_FIELDS.values(), "uss_mb")}
        out[kind] = {"processes": len(read), **totals,
                     "uss_mb_per_process": totals["uss_mb"] / len(read),
                     "pss_mb_per_process": totals["pss_mb"] / len(read)}
    return out


def _pids_by_kind(root_pid: int) -> Dict[str, list]:
    sampler = ProcessSampler(root_pid)
    sampler.sample()
    return sampler.pids_by_kind()


def process_memory_mb(pid: int) -> Optional[Dict[str, float]]:
    """RSS, PSS, USS and anonymous memory of one process in MB; None when it has ended."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            lines = handle.read().splitlines()
    except (FileNotFoundError, ProcessLookupError):
        return None
    kb = {}
    for line in lines[1:]:  # the first line names the address range
        name, value = line.split(":", 1)
        kb[name] = int(value.split()[0])
    if not kb:
        return None  # a zombie maps nothing
    figures = {report: kb[name] / 1024 for name, report in _FIELDS.items()}
    figures["uss_mb"] = sum(kb[name] for name in _PRIVATE) / 1024
    return figures
