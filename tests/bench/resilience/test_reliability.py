"""`swerve bench` writes its JSON and the table (structure only, never timing asserts), and the
reliability bench's runs: every fault kind injected into a real run, the grader crashing under a
scripted agent, and scripted tampering, forging and laundering agents on Ray."""
import json
from pathlib import Path

import pytest

from actors.cli.main import main
from actors.report.fault_report import fault_table

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.slow  # training runs with every fault kind


def test_bench_writes_results_and_table(tmp_path, monkeypatch):
    from bench import registry
    from envs.sandboxes import docker_engine

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(registry, "START_CONCURRENCY", (1, 4))  # the bench's shape; its sizes are `swerve bench`'s
    # The docker side (minutes of container starts) is measured by hand; here it says why it is absent.
    monkeypatch.setattr(docker_engine, "engine_reason", lambda: "docker: not measured in this test")
    assert main(["bench", "sandbox_start", "--repetitions", "1"]) == 0
    result = json.loads((tmp_path / "bench" / "results" / "sandbox_start.json").read_text())
    assert {"figure", "baseline", "ratio", "target", "met", "machine", "date"} <= set(result)
    assert set(result["details"]["local"]) == {f"{m}_c{c}" for m in ("cold", "warm") for c in (1, 4)}
    assert result["details"]["docker"] == "docker: not measured in this test"
    table = (tmp_path / "BENCHMARKS.md").read_text()
    assert "| sandbox_start |" in table


def test_unknown_benchmark_names_the_choices(tmp_path, monkeypatch):
    import pytest

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="engine_throughput"):
        main(["bench", "nope"])


def test_overrides_after_options_are_accepted():
    from actors.cli.main import parser

    args, extra = parser().parse_known_args(["bench", "sandbox_start", "--repetitions", "2", "sandbox.pool_size=2"])
    assert args.name == "sandbox_start" and extra == ["sandbox.pool_size=2"]


# Where each injected fault may show up: a sandbox killed while the grader runs is the grader's.
SOURCES = {"sandbox_kill": {"sandbox", "grader"}, "sandbox_start_fail": {"sandbox"}, "llm_error": {"engine"},
           "grader_crash": {"grader"}}
# High enough that every kind fires within the bench's two steps.
RATES = {"sandbox_kill_rate": 0.03, "sandbox_start_fail_rate": 0.3, "llm_error_rate": 0.1, "engine_kill_rate": 1.0,
         "grader_crash_rate": 0.5}
SCENARIOS = ("faults", "grader")


@pytest.fixture(scope="module")
def bench(ray_session, swerve_cache, tmp_path_factory):
    """`swerve bench reliability` once, at its smallest, for the tests below: the fault-injection
    run (every fault kind) and the grader-crash run. Its other scenarios are played elsewhere in
    make test, each once: the catalogues case by case (test_tamper_catalogue, test_red_team,
    test_bad_inputs), a scripted agent that tampers, forges and launders on Ray (below), a killed
    driver resumed (test_ray_job, test_pipeline), killed and hung roles (test_supervisor). The whole
    bench, every scenario, is make check's (test_the_whole_reliability_bench_meets_its_target)."""
    from bench.resilience import reliability as bench_reliability

    work = tmp_path_factory.mktemp("reliability")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(work)
        patch.setattr(bench_reliability, "SCENARIOS", SCENARIOS)
        patch.setattr(bench_reliability, "FAULT_RATES", RATES)
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


# One scripted agent (engine.backend=sim) that does all three at every episode: plants a conftest.py
# that passes every report, appends code rewriting the reports through names built at run time to
# every source file, then leaves what once became infra errors (a 60 MB sparse file, a name that is
# not UTF-8, a folder replaced by a file; the 2000-deep trees of the bench's laundering agent are
# make check's, and the red team's own tests play them on each shape).
LAUNDER_SHALLOW = ("truncate -s 60M sparse.bin", "touch \"$(printf 'bad\\377.py')\"",
                   "f=$(ls -d */ | head -1); rm -rf \"$f\" && echo x > \"$(basename $f)\"")


def test_a_scripted_agent_that_tampers_forges_and_launders_on_ray_earns_nothing(ray_session, swerve_cache, tmp_path):
    from bench.resilience.reliability import forge_command, scripted_agent_run
    from bench.adversarial.tamper_catalogue import SIM_TAMPER_COMMAND
    from configs import load_config

    cfg = load_config("tests/smoke.yaml", [f"model.cache_dir={swerve_cache}", f"tokenizer.cache_dir={swerve_cache}"])
    run = scripted_agent_run(cfg, tmp_path, "rl-everything", 2, "; ".join([SIM_TAMPER_COMMAND, forge_command(),
                                                                          *LAUNDER_SHALLOW]))
    rows, acc = run["rows"], run["accounting"]
    assert [r["policy_version"] for r in rows] == [1, 2]
    assert max(r["reward_mean"] or 0.0 for r in rows) == 0.0
    assert min(r["tamper_rate"] or 0.0 for r in rows) == 1.0  # every scored attempt flagged
    # Through episode actors on Ray: the agent's failures are its own, never excluded or quarantined.
    assert acc["infra_excluded"] == 0 and acc["quarantined"] == 0 and acc["trained"] >= 1


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
    from bench.resilience.reliability import SCENARIOS as ALL

    assert result["scenarios"] == list(ALL)
    assert result["met"], {k: v for k, v in result.items() if k != "details"}
