"""Injected faults (faults.*) against their recovery, gathered from the actors that inject them.

Episode-side faults (sandbox kill, sandbox start failure, LLM call error, grader crash) are
recovered when the episode they hit ended as infra_error: such a trajectory is never trained,
and the collector re-runs its member. An injected engine kill is recovered when the driver has
replaced the engine (with the current weights).
"""
from __future__ import annotations

EPISODE_FAULTS = ("sandbox_kill", "sandbox_start_fail", "llm_error", "grader_crash")


def fault_report(episode_results: list[dict], engine_kills: int, engine_replacements: int) -> dict:
    """{kind: {"injected", "recovered", "sources"}} for every fault kind, zeros included."""
    report = {kind: {"injected": 0, "recovered": 0, "sources": {}} for kind in EPISODE_FAULTS}
    for result in episode_results:
        for kind, entry in result.get("faults", {}).items():
            total = report.setdefault(kind, {"injected": 0, "recovered": 0, "sources": {}})
            total["injected"] += entry["injected"]
            total["recovered"] += entry["recovered"]
            for source, count in entry["sources"].items():
                total["sources"][source] = total["sources"].get(source, 0) + count
    report["engine_kill"] = {"injected": engine_kills, "recovered": engine_replacements, "sources": {}}
    return report


def fault_table(report: dict) -> str:
    rows = ["fault | injected | recovered | infra sources", "--- | --- | --- | ---"]
    rows += [f"{kind} | {e['injected']} | {e['recovered']} | "
             + (", ".join(f"{s}={n}" for s, n in sorted(e["sources"].items())) or "-")
             for kind, e in report.items()]
    return "\n".join(rows)
