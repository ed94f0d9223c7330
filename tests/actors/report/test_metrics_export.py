"""Metrics reach the node's Prometheus endpoint (ray_swerve_*), as the dashboard's metrics view reads them."""
import time
import urllib.request

from actors.report.metrics_export import MetricsExporter


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return reply.read().decode()


def test_gauges_appear_on_the_prometheus_endpoint(ray_session):
    import ray

    @ray.remote(num_cpus=0)
    class Exporter:
        def export(self, metrics):
            MetricsExporter("metrics-test").export(metrics)

    actor = Exporter.remote()
    ray.get(actor.export.remote({"admitted": 17, "staleness_max": 1, "reward_mean": None,
                                 "infra_error_by_source": {"sandbox": 3}}))
    port = ray._private.worker.global_worker.node.metrics_export_port
    deadline = time.monotonic() + 60
    lines = []
    while time.monotonic() < deadline:
        lines = [line for line in scrape(port).splitlines() if 'run="metrics-test"' in line]
        if any(line.startswith("ray_swerve_infra_errors_by_source") for line in lines):
            break
        time.sleep(1)
    assert any(line.startswith("ray_swerve_admitted{") and line.endswith(" 17.0") for line in lines), lines
    assert any('source="sandbox"' in line and line.endswith(" 3.0") for line in lines)
    assert not any(line.startswith("ray_swerve_reward_mean{") for line in lines)  # None is not exported
    ray.kill(actor)
