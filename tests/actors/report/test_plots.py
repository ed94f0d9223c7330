import pytest

from actors.report.plots import write_plots


@pytest.mark.slow
def test_five_pngs_from_metrics_rows(tmp_path):
    rows = [
        {"step": s, "resolved_rate": 0.1 * s, "reward_mean": 0.05 * s, "step_time_s": 2.0,
         "time_rollout_wait_s": 0.5, "time_logprob_s": 0.2, "time_actor_update_s": 1.0, "time_weight_sync_s": None,
         "staleness_hist": {"0": 3, "1": 5}, "truncated_rate": 0.5, "format_error_rate": 0.2, "infra_error_rate": 0.0,
         "train_pass_rate": 0.4 + 0.05 * s, "pass_rate_at_random": 0.5, "informative_group_fraction": 0.5, "entropy_mean": 0.3,
         "logprob_mismatch_mean": 1e-6, "mismatch_kl": 0.0, "behavior_kl": 0.01, "ratio_mean": 1.0,
         "ratio_max": 1.2, "clip_fraction": None, "grad_norm": 0.5, "advantage_std": 0.45}
        for s in range(1, 4)
    ]
    paths = write_plots(rows, tmp_path)
    assert sorted(p.name for p in paths) == ["learning.png", "outcomes.png", "reward.png", "staleness.png",
                                                 "step_time.png"]
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 2000
