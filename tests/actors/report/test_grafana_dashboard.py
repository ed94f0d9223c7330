"""configs/grafana/swerve_dashboard.json graphs only gauges the exporter really exports."""
import json
import re
from pathlib import Path

from actors.report.metrics_export import _NOT_GAUGES, PREFIX
from actors.report.run_dir import METRIC_NAMES

DASHBOARD = Path(__file__).resolve().parents[3] / "configs" / "grafana" / "swerve_dashboard.json"


def test_every_query_names_an_exported_gauge_filtered_by_run():
    exported = {f"ray_{PREFIX}{name}" for name in METRIC_NAMES if name not in _NOT_GAUGES}
    exported.add(f"ray_{PREFIX}infra_errors_by_source")
    dashboard = json.loads(DASHBOARD.read_text())
    queried = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            name, selector = re.fullmatch(r"(\w+)\{(.*)\}", target["expr"]).groups()
            assert name in exported, name
            assert selector == 'run=~"$run"'
            queried.add(name[len(f"ray_{PREFIX}"):])
    # What the issue asks to see: step time and its parts, staleness, reward, outcome mix,
    # engine load, sandbox start.
    assert {"step_time_s", "time_actor_update_s", "time_rollout_wait_s", "time_weight_sync_s", "staleness_max",
            "reward_mean", "resolved_rate", "infra_error_rate", "format_error_rate", "engine_kv_usage_max",
            "sandbox_start_p50_s"} <= queried
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["run"]["query"] == f"label_values(ray_{PREFIX}step_time_s, run)"
