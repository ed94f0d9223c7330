"""`swerve bench` writes its JSON and the table (structure only, never timing asserts), and the
reliability bench's runs: every fault kind injected into a real run, the grader crashing under a
scripted agent, and scripted tampering, forging and laundering agents on Ray."""
import json
from pathlib import Path

import pytest

from actors.cli import main
from actors.report.fault_report import fault_table

REPO = Path(__file__).resolve().parents[2]

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


# Where each injected fault may show up: a sandbox killed while the grader runs is the grader's.
SOURCES = {"sandbox_kill": {"sandbox", "grader"}, "sandbox_start_fail": {"sandbox"}, "llm_error": {"engine"},
           "grader_crash": {"grader"}}
# High enough that every kind fires within the bench's two steps.
RATES = {"sandbox_kill_rate": 0.03, "sandbox_start_fail_rate": 0.3, "llm_error_rate": 0.1, "engine_kill_rate": 1.0,
         "grader_crash_rate": 0.5}
SCENARIOS = ("faults", "grader", "tamper")


@pytest.fixture(scope="module")
def bench(ray_session, swerve_cache, tmp_path_factory):
    """`swerve bench reliability` once, at its smallest, for every test below: the fault-injection
    run (every fault kind), the grader-crash run and the scripted tampering, forging and laundering
    agents on Ray. The catalogues it would also play are played case by case in their own tests
    (test_tamper_catalogue, test_red_team, test_bad_inputs): one case of each here. The whole
    bench, every scenario, is make check's (test_the_whole_reliability_bench_meets_its_target)."""
    from bench import red_team, tamper_catalogue
    from bench import reliability as bench_reliability

    work = tmp_path_factory.mktemp("reliability")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(work)
        patch.setattr(bench_reliability, "SCENARIOS", SCENARIOS)
        patch.setattr(bench_reliability, "FAULT_RATES", RATES)
        patch.setattr(red_team, "CATALOGUE", [next(a for a in red_team.CATALOGUE if a.klass == klass)
                                              for klass in ("forge", "launder")])
        patch.setattr(tamper_catalogue, "CATALOGUE", [next(a for a in tamper_catalogue.CATALOGUE if a.writes),
                                                      next(a for a in tamper_catalogue.CATALOGUE if not a.writes)])
        assert main(["bench", "reliability", "--config", str(REPO / "tests" / "smoke.yaml"), "--repetitions", "1",
                     f"model.cache_dir={swerve_cache}", f"tokenizer.cache_dir={swerve_cache}", "rollout.max_turns=2",
                     "rollout.max_tokens_per_turn=16"]) == 0
    return work, json.loads((work / "bench" / "results" / "reliability.json").read_text())


def test_reliability_bench_writes_its_figures(bench, capsys):
    work, result = bench
    keys = ("faults_injected", "faults_recovered", "samples_lost", "trained_twice", "bad_inputs_tried",
            "bad_inputs_refused")
    assert all(isinstance(result[k], int) for k in keys), result
    assert result["scenarios"] == list(SCENARIOS)
    assert result["samples_lost"] == 0 and result["trained_twice"] == 0
    assert result["faults_recovered"] == result["faults_injected"] >= 1
    assert "| faults injected |" in (work / "RELIABILITY.md").read_text()
    assert "| reliability |" in (work / "BENCHMARKS.md").read_text()
    with capsys.disabled():
        print("\n" + fault_table(result["details"]["faults"]["faults"]))


def test_every_fault_kind_ends_as_infra_error_and_is_rerun(bench):
    """Every kind of fault injected into one real run: each shows up as infra_error with its source,
    is never trained, its member is re-run, and the books balance."""
    run = bench[1]["details"]["faults"]
    faults, acc = run["faults"], run["accounting"]
    assert run["samples_lost"] == 0 and acc["in_flight"] == 0 and run["trained_twice"] == 0
    assert run["versions"] == [1, 2]
    for kind in ("sandbox_kill", "sandbox_start_fail", "llm_error", "engine_kill"):
        assert faults[kind]["injected"] >= 1, (kind, faults)
    for kind, entry in faults.items():
        assert entry["recovered"] == entry["injected"], (kind, entry)
        assert set(entry["sources"]) <= SOURCES.get(kind, set()), (kind, entry)
    # Each recovered episode-side fault is one excluded trajectory; engine kills add their victims.
    assert acc["infra_excluded"] >= sum(faults[k]["recovered"] for k in SOURCES)
    assert acc["quarantined"] == 0  # retries are bounded but ample here: every failed member was re-run
    assert run["engine_replacements"] == faults["engine_kill"]["injected"] == 2


def test_a_grader_crash_in_a_run_is_the_graders_infra_error(bench):
    grader = bench[1]["faults_by_kind"]["grader_crash"]
    assert grader["injected"] >= 1 and grader["sources"] == {"grader": grader["injected"]}
    assert grader["recovered"] == grader["injected"]


def test_scripted_tampering_forging_and_laundering_agents_on_ray_earn_nothing(bench):
    result = bench[1]
    assert result["tampers_tried"] == 2 and result["tampers_rewarded"] == 0
    assert result["tampers_flagged"] == result["tampers_writing"] == 1
    assert result["rl_tamper_rate"] == 1.0 and result["rl_tamper_reward_max"] == 0.0
    assert result["red_team_tried"] == 6 and result["red_team_rewarded"] == 0 and result["red_team_laundered"] == 0
    assert result["rl_forge_reward_max"] == 0.0 and result["rl_forge_tamper_rate"] == 1.0
    # Through episode actors on Ray: the laundering agent's failures are its own, never excluded or quarantined.
    assert result["rl_launder_reward_max"] == 0.0 and result["rl_launder_infra_excluded"] == 0
    assert result["rl_launder_quarantined"] == 0 and result["details"]["tamper"]["rl_launder_trained"] >= 1


# make check: every scenario at once (the restart torture, a removed node, every role killed and hung,
# the whole of each catalogue): ~20 minutes. make test plays each path once elsewhere.
@pytest.mark.check
@pytest.mark.timeout(3600)
def test_the_whole_reliability_bench_meets_its_target(ray_session, swerve_cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "reliability", "--config", str(REPO / "tests" / "smoke.yaml"), "--repetitions", "1",
                 f"model.cache_dir={swerve_cache}", f"tokenizer.cache_dir={swerve_cache}", "rollout.max_turns=2",
                 "rollout.max_tokens_per_turn=16"]) == 0
    result = json.loads((tmp_path / "bench" / "results" / "reliability.json").read_text())
    from bench.reliability import SCENARIOS as ALL

    assert result["scenarios"] == list(ALL)
    assert result["met"], {k: v for k, v in result.items() if k != "details"}
