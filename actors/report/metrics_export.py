"""Every contract metric (docs/contracts.md, "Metrics") as a Ray gauge (Prometheus name
`ray_swerve_<name>`), tagged by run.

Tags stay low-cardinality (the run name only, plus the source of infra errors), so a long
run does not grow the node's metric series. Tags are the only strings exported, and they are
redacted like every other output (actors/report/redact.py).
"""
from __future__ import annotations

from typing import Mapping

from ray.util.metrics import Gauge

from actors.report.redact import redact_text
from actors.report.run_dir import METRIC_NAMES

PREFIX = "swerve_"
_NOT_GAUGES = {"infra_error_by_source"}


class MetricsExporter:
    def __init__(self, run_name: str):
        self.tags = {"run": redact_text(run_name)}
        self._gauges = {
            name: Gauge(PREFIX + name, f"swerve {name} (see docs/contracts.md)", tag_keys=("run",))
            for name in METRIC_NAMES if name not in _NOT_GAUGES
        }
        self._infra = Gauge(PREFIX + "infra_errors_by_source", "infra errors in the last batch by source",
                            tag_keys=("run", "source"))

    def export(self, metrics: Mapping) -> None:
        """Set every numeric metric present; None (nothing measured this step) leaves the gauge as it was."""
        for name, gauge in self._gauges.items():
            value = metrics.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                gauge.set(float(value), tags=self.tags)
        for source, count in (metrics.get("infra_error_by_source") or {}).items():
            self._infra.set(float(count), tags={**self.tags, "source": redact_text(source)})
