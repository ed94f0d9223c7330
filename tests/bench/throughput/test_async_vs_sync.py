"""async_vs_sync: the ideal bound from a workload's own parameters, and one real run's figures."""
from dataclasses import replace

import pytest

from bench.throughput.async_vs_sync import GROUP_SIZE, GROUPS, MAX_TURNS, bench_config, ideal_bound, measure
from policies.engines.sim_engine import workload_means

pytestmark = pytest.mark.slow  # training runs on Ray


def test_the_ideal_bound_is_the_engine_at_full_batch_and_the_trainer_is_calibrated_to_it(tiny_cfg, tmp_path):
    cfg = bench_config(tiny_cfg, "reference", "async", 2, MAX_TURNS, str(tmp_path), "b", windows=1)
    sim, engine = cfg.engine.sim, cfg.engine
    bound = ideal_bound(engine, GROUPS * GROUP_SIZE, MAX_TURNS)
    full_step_s = sim.step_base_s + sim.step_per_request_s * engine.max_batch_size
    assert bound["engine_tokens_per_s"] == pytest.approx(engine.max_batch_size / full_step_s)
    tokens = workload_means(sim, MAX_TURNS)["tokens"]
    assert bound["engine_traj_per_h"] == pytest.approx(3600 * bound["engine_tokens_per_s"] / tokens)
    # trainer capacity (batch / step time) equals engine capacity: neither side may wait in a perfect pipeline
    assert GROUPS * GROUP_SIZE / cfg.trainer.sim_step_s * 3600 == pytest.approx(bound["engine_traj_per_h"])
    heavy = bench_config(tiny_cfg, "heavy_tail", "async", 2, MAX_TURNS, str(tmp_path), "h", windows=1)
    assert heavy.trainer.sim_step_s > cfg.trainer.sim_step_s  # longer trajectories, longer ideal rollout
    token = bench_config(tiny_cfg, "heavy_tail", "async", 2, MAX_TURNS, str(tmp_path), "t", windows=1, unit="token")
    assert (token.rollout.staleness_unit, heavy.rollout.staleness_unit) == ("token", "trajectory")
    assert token.trainer.sim_step_s == heavy.trainer.sim_step_s  # the same calibration: only the unit differs


def test_one_run_with_the_real_driver_reports_its_windows(ray_session, tiny_cfg, tmp_path):
    cfg = bench_config(tiny_cfg, "reference", "async", 2, 4, str(tmp_path), "bench-async-test", windows=1)
    cfg = replace(cfg, rollout=replace(cfg.rollout, num_episode_actors=10))
    result = measure(cfg)
    assert len(result["windows"]) == 1 and result["traj_per_h"] > 0
    assert 0.0 <= result["trainer_idle_fraction"] <= 1.0 and 0.0 < result["engine_busy_fraction"] <= 1.0
    assert 0.0 < result["engine_utilization"] <= 1.05 and result["turns_mean"] <= 4
    assert result["dropped_stale"] == 0  # paced, not discarded
