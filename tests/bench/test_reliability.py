"""`swerve bench` writes its JSON and the table; structure only, never timing asserts."""
import json

import pytest

from actors.cli import main

pytestmark = pytest.mark.slow  # training runs with every fault kind


def test_bench_writes_results_and_table(tmp_path, monkeypatch):
    from envs import docker_engine

    monkeypatch.chdir(tmp_path)
    # The docker side (minutes of container starts) is measured by hand; here it says why it is absent.
    monkeypatch.setattr(docker_engine, "engine_reason", lambda: "docker: not measured in this test")
    assert main(["bench", "sandbox_start", "--repetitions", "1"]) == 0
    result = json.loads((tmp_path / "bench" / "results" / "sandbox_start.json").read_text())
    assert {"figure", "baseline", "ratio", "target", "met", "machine", "date"} <= set(result)
    assert set(result["details"]["local"]) == {f"{m}_c{c}" for m in ("cold", "warm") for c in (1, 16, 64)}
    assert result["details"]["docker"] == "docker: not measured in this test"
    table = (tmp_path / "BENCHMARKS.md").read_text()
    assert "| sandbox_start |" in table


def test_unknown_benchmark_names_the_choices(tmp_path, monkeypatch):
    import pytest

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="engine_throughput"):
        main(["bench", "nope"])


def test_overrides_after_options_are_accepted():
    from actors.cli import parser

    args, extra = parser().parse_known_args(["bench", "sandbox_start", "--repetitions", "2", "sandbox.pool_size=2"])
    assert args.name == "sandbox_start" and extra == ["sandbox.pool_size=2"]


@pytest.mark.timeout(900)  # four scenarios, three of them training runs on Ray
def test_reliability_bench_writes_its_figures(ray_session, swerve_cache, tmp_path, monkeypatch):
    from pathlib import Path

    from bench import reliability as bench_reliability

    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)
    # Tiny size: the restart-torture and node-loss scenarios run in their own tests
    # (test_restart_torture.py, test_faults.py); here the entry point, the fault runs and the catalog.
    monkeypatch.setattr(bench_reliability, "SCENARIOS", ("faults", "grader", "bad_inputs", "tamper"))
    # One forgery and one laundering: the whole red team is played in tests/bench/test_red_team.py.
    from bench import red_team

    monkeypatch.setattr(red_team, "CATALOGUE", [next(a for a in red_team.CATALOGUE if a.klass == klass)
                                                for klass in ("forge", "launder")])
    assert main(["bench", "reliability", "--config", str(repo / "tests" / "smoke.yaml"), "--repetitions", "1",
                 f"model.cache_dir={swerve_cache}", f"tokenizer.cache_dir={swerve_cache}", "rollout.max_turns=2",
                 "rollout.max_tokens_per_turn=16"]) == 0
    result = json.loads((tmp_path / "bench" / "results" / "reliability.json").read_text())
    keys = ("faults_injected", "faults_recovered", "samples_lost", "trained_twice", "bad_inputs_tried",
            "bad_inputs_refused")
    assert all(isinstance(result[k], int) for k in keys), result
    assert result["scenarios"] == ["faults", "grader", "bad_inputs", "tamper"] and result["bad_inputs_tried"] >= 1
    assert result["tampers_tried"] >= 12 and result["tampers_rewarded"] == 0
    assert result["tampers_flagged"] == result["tampers_writing"] >= 12
    assert result["rl_tamper_rate"] == 1.0 and result["rl_tamper_reward_max"] == 0.0
    assert result["red_team_tried"] == 6 and result["red_team_rewarded"] == 0 and result["red_team_laundered"] == 0
    assert result["rl_forge_reward_max"] == 0.0 and result["rl_forge_tamper_rate"] == 1.0
    # Through episode actors on Ray: the laundering agent's failures are its own, never excluded or quarantined.
    assert result["rl_launder_reward_max"] == 0.0 and result["rl_launder_infra_excluded"] == 0
    assert result["rl_launder_quarantined"] == 0 and result["details"]["tamper"]["rl_launder_trained"] >= 1
    grader = result["faults_by_kind"]["grader_crash"]
    assert grader["injected"] >= 1 and grader["sources"] == {"grader": grader["injected"]}
    assert result["samples_lost"] == 0 and result["trained_twice"] == 0
    assert result["faults_recovered"] == result["faults_injected"] >= 1
    assert "| faults injected |" in (tmp_path / "RELIABILITY.md").read_text()
    assert "| reliability |" in (tmp_path / "BENCHMARKS.md").read_text()


def test_roles_scenario_heals_a_killed_engine_server_and_reports_its_heal_time(ray_session, swerve_cache, tmp_path,
                                                                               monkeypatch):
    import signal

    from bench import reliability as bench_reliability
    from bench import role_faults
    from configs import load_config

    monkeypatch.setattr(role_faults, "ROLE_FAULTS", (("engine-0", "server", signal.SIGKILL),))
    cfg = load_config("tests/smoke.yaml", [f"model.cache_dir={swerve_cache}", f"tokenizer.cache_dir={swerve_cache}",
                                           "engine.num_engines=1", "rollout.max_turns=2",
                                           "rollout.max_tokens_per_turn=16"])
    report = bench_reliability.roles_run(cfg, tmp_path, steps=3)
    assert report["faults"] == {"engine_server_sigkill": {"injected": 1, "recovered": 1, "sources": {}}}
    assert report["heal_s"]["engine_server_sigkill"] > 0
    assert report["samples_lost"] == 0 and report["trained_twice"] == 0
