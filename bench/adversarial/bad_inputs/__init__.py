"""A catalog of bad-input probes and `run_all`, the count `swerve bench reliability` reports.

Each probe feeds one bad input (a model reply, a command, task rows, a config, a model
directory, a port) to the real code path and reports whether it was refused (rejected, or
contained while the episode goes on) with a message naming the problem.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import List

from bench.adversarial.bad_inputs import commands, config_values, model_dirs, ports, replies, rows
from bench.adversarial.bad_inputs.probe import CATEGORIES, Probe, ProbeResult, unavailable_reason

log = logging.getLogger(__name__)

PROBES: List[Probe] = [
    *replies.PROBES, *commands.PROBES, *rows.PROBES, *config_values.PROBES, *model_dirs.PROBES, *ports.PROBES,
]

__all__ = ["CATEGORIES", "PROBES", "Probe", "ProbeResult", "run_all", "run_probe", "unavailable_reason"]


def run_probe(probe: Probe, tmp_dir: Path) -> ProbeResult:
    """The probe's result; refused only when its message also holds the expected fragment.

    A probe that raises was not refused: the error is its message (the bench goes on).
    """
    work_dir = Path(tmp_dir) / probe.name
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        result = probe.run(work_dir)
    except Exception as error:  # noqa: BLE001 - an unexpected error is this probe's finding, reported
        log.warning("bad-input probe %s raised %s: %s", probe.name, type(error).__name__, error)
        return ProbeResult(False, f"raised {type(error).__name__}: {error}")
    return ProbeResult(result.refused and probe.expected in result.message, result.message)


def run_all(tmp_dir) -> dict:
    """Every probe that can run here; skipped ones (isolation missing) are listed, not counted."""
    report = []
    for probe in PROBES:
        entry = {"name": probe.name, "category": probe.category, "expected": probe.expected}
        skipped = unavailable_reason(probe)
        started_s = time.monotonic()
        result = ProbeResult(False, f"skipped: {skipped}") if skipped else run_probe(probe, Path(tmp_dir))
        entry.update(refused=result.refused, message=result.message, skipped=skipped,
                     duration_s=round(time.monotonic() - started_s, 3))
        report.append(entry)
    tried = [entry for entry in report if not entry["skipped"]]
    return {
        "bad_inputs_tried": len(tried),
        "bad_inputs_refused": sum(entry["refused"] for entry in tried),
        "bad_inputs_skipped": len(report) - len(tried),
        "probes": report,
    }
