"""`swerve bench reliability`: every fault kind injected into real runs, the driver SIGKILLed and
resumed three times, a Ray node removed mid-run, and the bad-input catalog (bench.adversarial.bad_inputs).

Reports faults injected vs recovered, samples lost (admitted but in no bucket of the accounting
identity, or left in flight at the end) and samples trained twice; both must be 0. The size
grows with --repetitions (training steps per scenario). Results also land in RELIABILITY.md.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from actors.report.fault_report import fault_table
from actors.training.sample_collector import COUNTERS
from configs import Config, load_config, to_yaml

REPORT = Path("RELIABILITY.md")
REPO = Path(__file__).resolve().parents[2]
NODE_LOSS_SCRIPT = REPO / "bench" / "node_loss_run.py"
SCENARIOS = ("faults", "grader", "roles", "restart_torture", "node_loss", "bad_inputs", "tamper")
# Fault rates of the fault-injection run: high enough that every kind fires in a few steps.
FAULT_RATES = {"sandbox_kill_rate": 0.03, "sandbox_start_fail_rate": 0.1, "llm_error_rate": 0.05,
               "engine_kill_rate": 1.0, "grader_crash_rate": 0.5}
# A grader crash needs an episode that submits, which the small random policy of the fault run
# rarely does: the grader run's episodes are a scripted agent's (engine.backend=sim) that runs
# `true` and submits at turn 1 or 2. Sandbox, grader, collector and trainer are the real ones.
GRADER_RATES = {"grader_crash_rate": 0.5}
# The scripted agents' replies come whole, at once (a zero-time decode step): these runs measure what the
# sandbox, the grader and the books do with what the agent did, not how long a reply takes.
INSTANT_REPLIES = ("engine.sim.step_base_s=0", "engine.sim.step_per_request_s=0")
GRADER_OVERRIDES = ("engine.backend=sim", "engine.sim.cap_fraction=0", "engine.sim.submit_turn_min=1",
                    "engine.sim.submit_turn_max=2", "engine.sim.command=true", *INSTANT_REPLIES)


# One scripted agent's command (engine.sim.command) that leaves, at random, what the listing,
# the reset or grading once could not handle: deep trees in the workspace and the jail's /tmp,
# a 60 MB sparse file, a name that is not UTF-8, a folder replaced by a file.
SIM_LAUNDER_COMMAND = (
    "case $((RANDOM % 5)) in 0) for i in $(seq 2000); do mkdir d && cd d || break; done;; "
    "1) cd /tmp && for i in $(seq 2000); do mkdir d && cd d || break; done;; 2) truncate -s 60M sparse.bin;; "
    "3) touch \"$(printf 'bad\\377.py')\";; *) f=$(ls -d */ | head -1); rm -rf \"$f\" && echo x > \"$(basename $f)\";; esac")


def forge_command() -> str:
    """One scripted agent's command that appends the red team's report rewriting (names built at
    run time, bench/adversarial/red_team.py) to every source file of whatever task it is given."""
    import shlex

    from bench.adversarial.red_team import REWRITE_REPORTS

    lines = " ".join(shlex.quote(line) for line in REWRITE_REPORTS.strip().splitlines())
    return (f"for f in $(find . -name '*.py' -not -path './tests/*' -not -name 'test_*'); do "
            f"printf '%s\\n' {lines} >> \"$f\"; done")


def scripted_agent_run(cfg: Config, work: Path, name: str, steps: int, command: str) -> dict:
    """An RL run on Ray (episode actors, sandboxes, collector, trainer) whose scripted agent runs
    `command` at turn 1 and submits at turn 2: its metrics and accounting."""
    from actors.stages.driver import train
    from actors.fleet.launch import init_ray

    overrides = ["engine.backend=sim", "engine.sim.cap_fraction=0", "engine.sim.submit_turn_min=2",
                 "engine.sim.submit_turn_max=2", "engine.sim.tokens_per_turn_min=600",
                 "engine.sim.tokens_per_turn_max=600", "rollout.max_tokens_per_turn=640", "rollout.max_turns=2",
                 *INSTANT_REPLIES]
    run_cfg = _config(cfg, work, [f"run.dir={work}", f"run.name={name}", f"trainer.total_steps={steps}", *overrides])
    run_cfg.engine.sim.command = command  # set here, not as an override: a shell line is no YAML scalar
    init_ray(run_cfg)
    run = train(run_cfg)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {"rows": rows, "accounting": json.loads((run / "accounting.json").read_text())}


def tamper_run(cfg: Config, work: Path, steps: int) -> dict:
    """The tamper catalogue (bench/adversarial/tamper_catalogue.py) and the red team's (bench/adversarial/red_team.py)
    played once, and RL runs on Ray whose scripted agent, at every episode, plants a
    report-rewriting conftest.py, rewrites the reports from the source through names built at
    run time, or leaves what once became infra errors: no reward may come of any, and the last
    run may exclude nothing and quarantine nothing."""
    from actors.stages.policy_setup import ensure_policy
    from bench.adversarial.red_team_harnesses import play_red_team
    from bench.adversarial.tamper_catalogue import SIM_TAMPER_COMMAND, play_catalogue

    (work / "catalogue").mkdir()
    report = play_catalogue(str(work / "catalogue"))
    (work / "red_team").mkdir()
    # Both harnesses: the env alone, and the episode actor (with the run's tokenizer) a run uses.
    report.update(play_red_team(str(work / "red_team"), ensure_policy(cfg)[0]))
    rl = scripted_agent_run(cfg, work, "rl", steps, SIM_TAMPER_COMMAND)
    report["rl_tamper_rate"] = min(r["tamper_rate"] or 0.0 for r in rl["rows"])
    report["rl_reward_max"] = max(r["reward_mean"] or 0.0 for r in rl["rows"])
    forge = scripted_agent_run(cfg, work, "rl-forge", steps, forge_command())
    report["rl_forge_reward_max"] = max(r["reward_mean"] or 0.0 for r in forge["rows"])
    report["rl_forge_tamper_rate"] = min(r["tamper_rate"] or 0.0 for r in forge["rows"])
    launder = scripted_agent_run(cfg, work, "rl-launder", steps, SIM_LAUNDER_COMMAND)
    acc = launder["accounting"]
    report.update({"rl_launder_reward_max": max(r["reward_mean"] or 0.0 for r in launder["rows"]),
                   "rl_launder_infra_excluded": acc["infra_excluded"], "rl_launder_quarantined": acc["quarantined"],
                   "rl_launder_trained": acc["trained"]})
    return report


def samples_lost(acc: dict) -> int:
    """Admitted work that no bucket accounts for, plus work still in flight when the run ended."""
    return abs(acc["admitted"] - sum(acc[k] for k in COUNTERS[1:])) + acc["in_flight"]


def _trained_twice(run: Path) -> int:
    keys = []
    for f in (run / "trajectories").glob("*.jsonl"):
        keys += [(t["group_id"], t["member"], t["attempt"]) for t in map(json.loads, f.read_text().splitlines())]
    return len(keys) - len(set(keys))


def _config(cfg: Config, work: Path, overrides: list[str]) -> Config:
    base = work / "base.yaml"
    base.write_text(to_yaml(cfg))
    return load_config(str(base), overrides)


def fault_run(cfg: Config, work: Path, steps: int, rates: dict = FAULT_RATES, overrides: tuple = ()) -> dict:
    from actors.stages.driver import train
    from actors.fleet.launch import init_ray

    run_cfg = _config(cfg, work, [f"run.dir={work}", f"run.name={work.name}", f"trainer.total_steps={steps}",
                                  "run.trajectories_per_step=100000", "rollout.max_infra_retries=8",
                                  *(f"faults.{k}={v}" for k, v in rates.items()), *overrides])
    init_ray(run_cfg)
    run = train(run_cfg)
    acc = json.loads((run / "accounting.json").read_text())
    versions = [json.loads(line)["policy_version"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {"faults": acc["faults"], "samples_lost": samples_lost(acc), "trained_twice": _trained_twice(run),
            "accounting": {k: acc[k] for k in COUNTERS}, "engine_replacements": acc["engine_replacements"],
            "versions": versions}


# Short deadlines, so a hang is found in seconds (the defaults are sized for real models);
# the sandbox ones also serve tests/actors/fleet/test_supervisor.py's sandbox faults.
# A stopped sandbox met in the graded view's listing waits out its limit: 10 s, not the default 60.
SANDBOX_FAULT_DEADLINES = ("sandbox.command_timeout_s=5", "env.swe.grade_timeout_s=10", "env.swe.listing_timeout_s=10",
                           "deadlines.sandbox_margin_s=5")
ROLE_OVERRIDES = ("trainer.checkpoint_interval=1", "deadlines.train_step_s=20", "deadlines.engine_health_s=3",
                  "engine.health_interval_s=1", *SANDBOX_FAULT_DEADLINES)


def roles_run(cfg: Config, work: Path, steps: int) -> dict:
    """Each role of bench.resilience.role_faults.ROLE_FAULTS killed or stopped after a run's first step, one
    run each: the run must finish every step by itself; reports each one's heal time."""
    from actors.stages.driver import train
    from actors.fleet.launch import init_ray
    from bench.resilience.role_faults import ROLE_FAULTS, AfterStep, hit

    faults, heal_s, lost, twice = {}, {}, 0, 0
    for role, target, sig in ROLE_FAULTS:
        name = f"{role}-{target}-{sig.name.lower()}"
        run_cfg = _config(cfg, work, [f"run.dir={work}", f"run.name={name}", f"trainer.total_steps={max(steps, 3)}",
                                      *ROLE_OVERRIDES])
        init_ray(run_cfg)
        act = AfterStep(work / name, lambda: hit(f"swerve-{name}", role, target, sig))
        run = train(run_cfg)
        acc = json.loads((run / "accounting.json").read_text())
        rows = (run / "metrics.jsonl").read_text().splitlines()
        healed = act.acted_at is not None and len(rows) == max(steps, 3) and samples_lost(acc) == 0
        kind = f"{role.rsplit('-', 1)[0]}_{target}_{sig.name.lower()}"
        faults[kind] = {"injected": int(act.acted_at is not None), "recovered": int(healed), "sources": {}}
        heal_s[kind] = act.heal_s
        lost += samples_lost(acc)
        twice += _trained_twice(run)
    return {"faults": faults, "heal_s": heal_s, "samples_lost": lost, "trained_twice": twice}


def torture_run(cfg: Config, work: Path, steps: int) -> dict:
    from bench.resilience.torture import run_torture

    overrides = [f"model.cache_dir={cfg.model.cache_dir}", f"tokenizer.cache_dir={cfg.tokenizer.cache_dir}",
                 "engine.num_engines=1", f"rollout.max_turns={cfg.rollout.max_turns}",
                 f"rollout.max_tokens_per_turn={cfg.rollout.max_tokens_per_turn}"]
    report = run_torture(work, overrides, total_steps=max(steps, 6), seed=cfg.run.seed)
    acc = report["accounting"]
    versions_ok = report["versions"] == list(range(1, max(steps, 6) + 1))
    return {"kills": report["kills"], "resumed": report["resumed"], "versions_continue": versions_ok,
            "samples_lost": samples_lost(acc), "trained_twice": report["trained_twice"],
            "injected": len(report["kills"]), "recovered": len(report["resumed"]) if versions_ok else 0}


def node_loss_run(cfg: Config, work: Path, steps: int) -> dict:
    run = subprocess.run([sys.executable, str(NODE_LOSS_SCRIPT), str(work), cfg.model.cache_dir, str(max(steps, 2))],
                         cwd=REPO, capture_output=True, text=True, timeout=1800)
    if run.returncode != 0:
        raise RuntimeError(f"node-loss run failed:\n{run.stdout[-3000:]}{run.stderr[-3000:]}")
    report = json.loads(run.stdout.strip().splitlines()[-1])
    acc = report["accounting"]
    recovered = int(acc["identity_holds"] and acc["infra_excluded"] >= 1 and samples_lost(acc) == 0)
    return {"injected": report["nodes_removed"], "recovered": recovered, "samples_lost": samples_lost(acc),
            "infra_excluded": acc["infra_excluded"], "sandboxes_on_removed_node": report["sandboxes_on_removed_node"]}


def _episode_faults(details: dict) -> dict:
    """{kind: {"injected", "recovered", "sources"}} summed over the fault-injection runs."""
    total: dict = {}
    for run in ("faults", "grader", "roles"):
        for kind, e in details.get(run, {}).get("faults", {}).items():
            entry = total.setdefault(kind, {"injected": 0, "recovered": 0, "sources": {}})
            entry["injected"] += e["injected"]
            entry["recovered"] += e["recovered"]
            for source, n in e["sources"].items():
                entry["sources"][source] = entry["sources"].get(source, 0) + n
    return total


def reliability(cfg: Config, repetitions: int, scenarios: tuple | None = None) -> dict:
    scenarios = scenarios or SCENARIOS
    steps = 2 * max(repetitions, 1)
    details: dict = {}
    with tempfile.TemporaryDirectory(prefix="swerve-reliability-") as tmp:
        work = Path(tmp)
        if "faults" in scenarios:
            (work / "faults").mkdir()
            details["faults"] = fault_run(cfg, work / "faults", steps)
        if "grader" in scenarios:
            (work / "grader").mkdir()
            details["grader"] = fault_run(cfg, work / "grader", steps, GRADER_RATES, GRADER_OVERRIDES)
        if "roles" in scenarios:
            (work / "roles").mkdir()
            details["roles"] = roles_run(cfg, work / "roles", steps)
        if "restart_torture" in scenarios:
            (work / "torture").mkdir()
            details["restart_torture"] = torture_run(cfg, work / "torture", steps + 2)
        if "node_loss" in scenarios:
            (work / "node").mkdir()
            details["node_loss"] = node_loss_run(cfg, work / "node", steps)
        if "bad_inputs" in scenarios:
            from bench.adversarial.bad_inputs import run_all  # another issue's catalog: missing means the bench fails

            (work / "bad").mkdir()
            details["bad_inputs"] = run_all(work / "bad")
        if "tamper" in scenarios:
            (work / "tamper").mkdir()
            details["tamper"] = tamper_run(cfg, work / "tamper", steps)
    faults = _episode_faults(details)
    if "restart_torture" in details:
        faults["driver_sigkill"] = {k: details["restart_torture"][k] for k in ("injected", "recovered")}
    if "node_loss" in details:
        faults["node_removed"] = {k: details["node_loss"][k] for k in ("injected", "recovered")}
    injected = sum(e["injected"] for e in faults.values())
    recovered = sum(e["recovered"] for e in faults.values())
    bad = details.get("bad_inputs", {})
    tamper = details.get("tamper", {})
    result = {
        "faults_injected": injected, "faults_recovered": recovered,
        "samples_lost": sum(d.get("samples_lost", 0) for d in details.values()),
        "trained_twice": sum(d.get("trained_twice", 0) for d in details.values()),
        "bad_inputs_tried": bad.get("bad_inputs_tried", 0), "bad_inputs_refused": bad.get("bad_inputs_refused", 0),
        "tampers_tried": tamper.get("tampers_tried", 0), "tampers_rewarded": tamper.get("tampers_rewarded", 0),
        "tampers_flagged": tamper.get("tampers_flagged", 0), "tampers_writing": tamper.get("tampers_writing", 0),
        "red_team_tried": tamper.get("red_team_tried", 0), "red_team_rewarded": tamper.get("red_team_rewarded", 0),
        "red_team_laundered": tamper.get("red_team_laundered", 0),
        "red_team_by_cell": tamper.get("red_team_by_cell", {}), "red_team_skipped": tamper.get("red_team_skipped", {}),
        "rl_forge_reward_max": tamper.get("rl_forge_reward_max"),
        "rl_forge_tamper_rate": tamper.get("rl_forge_tamper_rate"),
        "rl_launder_reward_max": tamper.get("rl_launder_reward_max"),
        "rl_launder_infra_excluded": tamper.get("rl_launder_infra_excluded"),
        "rl_launder_quarantined": tamper.get("rl_launder_quarantined"),
        "rl_tamper_rate": tamper.get("rl_tamper_rate"), "rl_tamper_reward_max": tamper.get("rl_reward_max"),
        "faults_by_kind": faults, "scenarios": list(details),
        "heal_s_by_role": details.get("roles", {}).get("heal_s", {}),
        "figure": "faults recovered / injected", "ratio": recovered / injected if injected else 0.0,
        "baseline": float(injected), "bound": None,
        "target": "all recovered, 0 samples lost, 0 trained twice, every bad input refused",
        "details": details,
    }
    result["met"] = (recovered == injected and result["samples_lost"] == 0 and result["trained_twice"] == 0
                     and result["bad_inputs_refused"] == result["bad_inputs_tried"]
                     and result["tampers_rewarded"] == 0 and result["tampers_flagged"] == result["tampers_writing"]
                     and not result["rl_tamper_reward_max"] and result["red_team_rewarded"] == 0
                     and result["red_team_laundered"] == 0 and not result["rl_forge_reward_max"]
                     and not result["rl_launder_reward_max"]
                     and not result["rl_launder_infra_excluded"] and not result["rl_launder_quarantined"])
    return result


def write_report(result: dict) -> None:
    table = fault_table({k: {"sources": {}, **e} for k, e in result["faults_by_kind"].items()})
    lines = ["# Reliability", "", "Generated by `swerve bench reliability` (bench/results/reliability.json): faults "
             "injected into real runs (`faults.*`), the driver SIGKILLed and resumed three times (once mid-checkpoint), "
             "a Ray node removed mid-run, and the bad-input catalog (`bench/adversarial/bad_inputs`).", "",
             f"Machine: {result['machine']}; date: {result['date']}; scenarios: {', '.join(result['scenarios'])}.", "",
             "| figure | value |", "|---|---|",
             f"| faults injected | {result['faults_injected']} |", f"| faults recovered | {result['faults_recovered']} |",
             f"| samples lost (must be 0) | {result['samples_lost']} |",
             f"| samples trained twice (must be 0) | {result['trained_twice']} |",
             f"| bad inputs tried | {result['bad_inputs_tried']} |",
             f"| bad inputs refused (must be all) | {result['bad_inputs_refused']} |",
             f"| tamper attempts tried | {result['tampers_tried']} |",
             f"| tamper attempts rewarded (must be 0) | {result['tampers_rewarded']} |",
             f"| writing tamper attempts flagged (must be all {result['tampers_writing']}) | {result['tampers_flagged']} |",
             f"| RL run with a tampering agent: tamper_rate / best reward_mean (must be 0) | "
             f"{result['rl_tamper_rate']} / {result['rl_tamper_reward_max']} |",
             f"| red team attempts tried (bench/adversarial/red_team.py, 4 task shapes x 2 harnesses) | "
             f"{result['red_team_tried']} |",
             f"| red team attempts rewarded (must be 0) | {result['red_team_rewarded']} |",
             f"| red team attempts laundered into infra errors or a broken sandbox (must be 0) | "
             f"{result['red_team_laundered']} |",
             *(f"| red team, {cell}: tried / rewarded / laundered | {c['tried']} / {c['rewarded']} / {c['laundered']} |"
               for cell, c in result["red_team_by_cell"].items()),
             *(f"| red team, {shape}: not played | {why.splitlines()[0]} |" for shape, why in result["red_team_skipped"].items()),
             f"| RL run with a forging agent (reports rewritten through built names): tamper_rate / best "
             f"reward_mean (must be 0) | {result['rl_forge_tamper_rate']} / {result['rl_forge_reward_max']} |",
             f"| RL run with a laundering agent: best reward_mean / infra_excluded / quarantined (must be 0) | "
             f"{result['rl_launder_reward_max']} / {result['rl_launder_infra_excluded']} / "
             f"{result['rl_launder_quarantined']} |", "", "Per fault:", "",
             "| role fault (scenario `roles`) | time to heal (s) |", "|---|---|",
             *(f"| {kind} | {value} |" for kind, value in result.get("heal_s_by_role", {}).items()),
             "", "Time to heal: from the fault to the run's next finished step (after a rollback, the step it had "
             "reached plus one). A hang is found by its deadline first: the bench sets deadlines.train_step_s=20, "
             "engine health 3 s, sandbox calls their own limit plus deadlines.sandbox_margin_s=5 (the workspace "
             "listing's own limit, env.swe.listing_timeout_s, is 10 s here), and the batch then waits for the hung episode's re-run (staleness pacing).",
             "",
             *(f"| {line} |" for line in table.splitlines()), "",
             "A grader crash can only be injected when an episode submits, which the small random policy of the "
             "fault run rarely does: the grader run's episodes are a scripted agent's (engine.backend=sim) that "
             "submits at turn 1 or 2, with the real sandbox, grader, collector and trainer. "
             "Engine kills are recovered by replacing the engine; their victims are counted in infra_excluded."]
    REPORT.write_text("\n".join(lines) + "\n")
