"""`swerve status`: attach to a running job's actors and print its live books."""
from __future__ import annotations

import json

import ray

from actors.fleet.launch import namespace
from actors.fleet.remote import engine_call, engine_name
from actors.cluster.roles import CollectorRole
from actors.training.sample_collector import COUNTERS
from configs import Config

ENGINE_LOOKUP_LIMIT = 1024


def collect_status(cfg: Config, address: str) -> dict:
    ns = namespace(cfg)
    if not ray.is_initialized():
        ray.init(address=address or "auto", namespace=ns, log_to_driver=False)
    try:
        collector = ray.get_actor("collector", namespace=ns)
    except ValueError as err:
        raise RuntimeError(f"no running swerve job named '{cfg.run.name}' in Ray namespace '{ns}' "
                           "(pass run.name=NAME of the job, and --address of its cluster)") from err
    live = CollectorRole(collector, cfg.deadlines).live()
    engines = []
    for index in range(ENGINE_LOOKUP_LIMIT):
        try:
            handle = ray.get_actor(engine_name(index), namespace=ns)
        except ValueError:
            break
        engines.append(engine_call(handle, "stats", timeout_s=cfg.deadlines.engine_health_s))
    return {"run": cfg.run.name, "namespace": ns, **live, "engines": engines}


def format_status(status: dict) -> str:
    acc, batch = status["accounting"], status["last_batch"]
    lines = [
        f"run {status['run']} (namespace {status['namespace']}): policy version {acc['version']}",
        "accounting: " + " ".join(f"{k}={acc[k]}" for k in COUNTERS)
        + f" identity={'holds' if acc['identity_holds'] else 'BROKEN'}",
        "last batch: " + " ".join(f"{k}={batch.get(k)}" for k in ("reward_mean", "resolved_rate", "truncated_rate",
                                                                    "format_error_rate", "infra_error_rate",
                                                                    "staleness_mean", "staleness_max",
                                                                    "rollout_traj_per_hour")),
        f"oldest admitted version in flight: {status['oldest_in_flight_version']}, pending: {status['pending']}",
    ]
    for e in status["engines"]:
        lines.append(f"engine-{e['index']}: v{e['version']} running={e['running']} queued={e['queued']} "
                     f"kv={e['kv_usage']:.3f} tok/s={e['tokens_per_s']:.0f}")
    return "\n".join(lines)


def main_status(cfg: Config, address: str, as_json: bool) -> int:
    status = collect_status(cfg, address)
    print(json.dumps(status, default=str) if as_json else format_status(status))
    return 0
