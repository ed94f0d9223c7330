"""turn_overhead, scale and weight_sync: each runs and reports its figures (structure, never timing)."""
import pytest
from bench.throughput import scale as bench_scale
from bench.registry import weight_sync
from bench.throughput.turn_overhead import turn_overhead

pytestmark = pytest.mark.slow  # benchmark fleets on Ray


def test_turn_overhead_reports_the_turn_and_its_parts(ray_session, tiny_cfg):
    result = turn_overhead(tiny_cfg, repetitions=1)
    parts = result["parts_median_s"]
    assert result["median_s"] > 0 and set(parts) == {"ray_call_s", "generate_s", "sandbox_exec_s", "local_exec_s"}
    assert result["baseline"] == parts["ray_call_s"] and result["met"] == (result["median_s"] <= 0.003)


def test_scale_holds_every_episode_in_flight_at_once(ray_session, tiny_cfg, monkeypatch):
    monkeypatch.setattr(bench_scale, "LEVELS", (2, 4))
    monkeypatch.setattr(bench_scale, "ABSORB_S", 0.5)
    monkeypatch.setattr(bench_scale, "POLL_S", 0.5)
    monkeypatch.setattr(bench_scale, "HOLD_S", 1.0)
    # The wait for the machine's memory to settle between levels: in make test the other worker's
    # tests hold and free memory at will, so it waited its whole minute (the bench runs alone).
    monkeypatch.setattr(bench_scale, "_wait_for_memory_back", lambda before_mb: None)
    result = bench_scale.scale(tiny_cfg, repetitions=1)
    assert [level["episodes"] for level in result["levels"]] == [2, 4]
    assert result["concurrent_episodes"] == 4  # no cap below the episode actors anywhere
    assert result["collector_completions_per_s"] > 0 and result["collector_in_process_per_s"] > 0
    # Ray's floor for the same calls, one and BATCH completions per call, fed the same way.
    run = result["absorption_runs"][0]
    assert run["ray_floor_per_s"] > 0 and run["ray_floor_batched_per_s"] > 0 and run["batch"] == bench_scale.BATCH
    assert result["levels"][1]["memory_used_mb"] > 0  # 4 episode and 4 sandbox actors cost memory
    # The session's Ray descends from this process: the level waited for every sandbox actor too,
    # and its memory is read by kind of process.
    assert all(level["peak_sandbox_actors"] >= level["episodes"] for level in result["levels"])
    by_kind = result["memory_per_episode_by_kind"]
    assert by_kind["episode actors"]["uss_mb"] > 0 and by_kind["sandbox actors"]["uss_mb"] > 0
    assert by_kind["episode actors"]["processes_per_episode"] >= 1


def test_weight_sync_pushes_to_one_and_two_engines(ray_session, tiny_cfg):
    result = weight_sync(tiny_cfg, repetitions=1)
    assert len(result["runs"][1]) == len(result["runs"][2]) == 1
    assert result["seconds_two_engines"] > 0 and result["weights_mb"] > 0


def test_memory_per_episode_leaves_out_a_level_that_did_not_hold():
    # A level that timed out holds fewer processes than its count: 128 in the books, 63 sandboxes up.
    levels = [{"episodes": 16, "memory_used_mb": 2400.0, "outcome": bench_scale.HELD},
              {"episodes": 96, "memory_used_mb": 14400.0, "outcome": bench_scale.HELD},
              {"episodes": 128, "memory_used_mb": 15800.0, "outcome": "timed out"}]
    assert bench_scale._per_episode_mb(levels) == 150.0
    assert bench_scale._projected_mb(levels, 128) == 14400.0 + 150.0 * 32
    assert bench_scale._per_episode_mb([{**levels[2]}]) == 15800.0 / 128  # nothing held: its average
