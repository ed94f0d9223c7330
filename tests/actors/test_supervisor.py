"""The driver's supervisor: roles killed (SIGKILL) or hung (SIGSTOP) in the middle of a real run
on local Ray are survived with no human action (no --resume): every step is trained, the books
balance, nothing is trained twice. Unit tests of the bounds need no Ray."""
import json
import logging
import os
import re
import signal
import time

import pytest

from actors.driver import train
from actors.sample_collector import COUNTERS
from actors.supervisor import RoleFailure, RunAborted, Supervisor, role_kind
from bench.reliability import SANDBOX_FAULT_DEADLINES
from bench.role_faults import AfterStep, actor_pid, hit, server_pid
from configs import load_config
from configs.schema import RunConfig
from policies.checkpoint import step_dir_name

IDENTITY = COUNTERS[1:]


def test_rollbacks_are_bounded_per_role_and_in_total_and_the_message_says_what_to_run():
    supervisor = Supervisor(RunConfig(max_restarts=2, max_restarts_total=3), "swerve train --resume")
    supervisor.failed(RoleFailure("collector", "died"))
    supervisor.failed(RoleFailure("trainer-1", "hung"))
    supervisor.failed(RoleFailure("trainer-0", "died"))
    assert supervisor.restarts(engine_restarts=2) == {"collector": 1, "trainer": 2, "engine": 2, "episode": 0, "run": 0}
    with pytest.raises(RunAborted) as err:
        supervisor.failed(RoleFailure("collector", "died (SIGKILL)"))  # a 4th in all: past the total bound
    assert "collector" in str(err.value) and "died (SIGKILL)" in str(err.value)
    assert "swerve train --resume" in str(err.value)
    per_role = Supervisor(RunConfig(max_restarts=1, max_restarts_total=10), "x")
    per_role.failed(RoleFailure("trainer-0", "died"))
    with pytest.raises(RunAborted):
        per_role.failed(RoleFailure("trainer-0", "died"))
    assert role_kind("trainer-12") == "trainer" and role_kind("collector") == "collector"


def small(tmp_path, cache, name, *extra):
    return load_config("tests/smoke.yaml", [
        f"run.dir={tmp_path}", f"run.name={name}", "engine.num_engines=1", "trainer.total_steps=3",
        "trainer.checkpoint_interval=1", f"model.cache_dir={cache}", f"tokenizer.cache_dir={cache}",
        "rollout.max_turns=2", "rollout.max_tokens_per_turn=16", *extra,
    ])


def finished_whole(path, steps=3) -> dict:
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    acc = json.loads((path / "accounting.json").read_text())
    assert acc["admitted"] == sum(acc[k] for k in IDENTITY) and acc["in_flight"] == 0
    seen = []
    for f in sorted((path / "trajectories").glob("*.jsonl")):
        seen += [(t["group_id"], t["member"], t["attempt"]) for t in map(json.loads, f.read_text().splitlines())]
    assert len(seen) == len(set(seen))  # nothing trained twice
    return acc


@pytest.mark.slow
# trainer-0 killed: test_a_corrupt_newest_checkpoint_is_skipped_when_the_run_heals.
@pytest.mark.parametrize("role", ["collector", "episode-0"])
def test_a_killed_role_is_replaced_and_the_run_finishes(ray_session, swerve_cache, tmp_path, role):
    cfg = small(tmp_path, swerve_cache, f"kill-{role}")
    ns = f"swerve-{cfg.run.name}"
    killed = []
    AfterStep(tmp_path / cfg.run.name, lambda: killed.append(hit(ns, role, "actor", signal.SIGKILL)))
    acc = finished_whole(train(cfg))
    kind = role_kind(role)
    assert killed and acc["restarts"][kind] >= 1
    if kind in ("collector", "trainer"):  # stateful: the run rolled back to its checkpoint once
        assert acc["restarts"][kind] == 1 and acc["heal_s"][kind][0] > 0
    else:  # replaced where it died, its work re-run; nothing rolled back
        assert acc["restarts"]["collector"] == acc["restarts"]["trainer"] == 0 and acc["infra_excluded"] >= 0


@pytest.mark.slow
def test_a_hung_trainer_shard_is_found_by_its_deadline(ray_session, swerve_cache, tmp_path):
    # No checkpoint after step 1: the stopped shard is met in step 2's update, and the run starts over.
    cfg = small(tmp_path, swerve_cache, "hang-trainer", "deadlines.train_step_s=20", "trainer.checkpoint_interval=2")
    ns = f"swerve-{cfg.run.name}"
    AfterStep(tmp_path / cfg.run.name, lambda: hit(ns, "trainer-0", "actor", signal.SIGSTOP))
    acc = finished_whole(train(cfg))
    assert acc["restarts"]["trainer"] == 1


@pytest.mark.slow
def test_a_hung_engine_server_is_replaced_and_the_run_goes_on(ray_session, swerve_cache, tmp_path):
    cfg = small(tmp_path, swerve_cache, "hang-engine", "deadlines.engine_health_s=3", "engine.health_interval_s=1")
    ns = f"swerve-{cfg.run.name}"
    stopped = []
    AfterStep(tmp_path / cfg.run.name, lambda: stopped.append(hit(ns, "engine-0", "server", signal.SIGSTOP)))
    acc = finished_whole(train(cfg))
    assert stopped and acc["restarts"]["engine"] >= 1 and acc["restarts"]["trainer"] == 0
    with pytest.raises(ProcessLookupError):  # the stopped server ended with its engine
        for _ in range(100):
            os.kill(stopped[0], 0)
            time.sleep(0.1)


def _playing(ns: str) -> bool:
    """The fleet is up and its episodes have started (their first generate calls are on their way)."""
    import ray

    try:
        ray.get_actor("episode-0", namespace=ns)
        server_pid(actor_pid(ns, "engine-0"))
    except (ValueError, LookupError, KeyError):
        return False
    return True


@pytest.mark.slow
def test_an_engine_that_takes_requests_and_never_answers_is_found_by_the_watchdog(
        ray_session, swerve_cache, tmp_path, capfd):
    """A hang no single deadline is set to see: the engine's server is stopped as the episodes begin,
    so its socket takes every generate call and answers none, and the engine set is told to
    tolerate any number of missed health probes. No call fails (generate_s is an hour); only the
    run-level watchdog can end the wait: it dumps who waits on what and rolls the run back."""
    cfg = small(tmp_path, swerve_cache, "never-answers", "deadlines.progress_s=20", "run.status_interval_s=1",
                "deadlines.engine_health_misses=1000000", "deadlines.engine_health_s=2", "engine.health_interval_s=1",
                "trainer.total_steps=2")
    ns = f"swerve-{cfg.run.name}"
    stopped = []
    fault = AfterStep(tmp_path / cfg.run.name, lambda: stopped.append(hit(ns, "engine-0", "server", signal.SIGSTOP)),
                      step=0, ready=lambda: _playing(ns))
    path = train(cfg)
    acc = finished_whole(path, steps=2)
    log = capfd.readouterr().out
    assert stopped and acc["restarts"]["run"] == 1 and acc["restarts"]["engine"] == 0
    events = [e for e in map(json.loads, (path / "events.jsonl").read_text().splitlines()) if e["event"] == "rollback"]
    assert [e["role"] for e in events] == ["run"] and "deadlines.progress_s" in events[0]["cause"]
    dump = log[log.index("run stalled"):]
    assert "(deadlines.progress_s)" in dump and "driver: waiting on collector.next_batch" in dump
    assert "engine: " in dump and "in_flight=" in dump
    print(f"watchdog: fault to next finished step {fault.heal_s} s (progress_s 20)")


@pytest.mark.slow
def test_a_collector_call_that_never_returns_is_ended_by_its_deadline(ray_session, swerve_cache, tmp_path, capfd):
    """The collector stopped (SIGSTOP) after the first step: the driver's next call to it never
    returns (a book call, or the snapshot of step 1's checkpoint), the collector's handle ends the
    wait at its deadline, names the role and the run rolls back. (The watchdog cannot be the one: it reads the books
    from that same collector.)"""
    cfg = small(tmp_path, swerve_cache, "collector-hangs", "deadlines.collector_call_s=10", "deadlines.checkpoint_s=10",
                "trainer.total_steps=2")
    ns = f"swerve-{cfg.run.name}"
    stopped = []
    AfterStep(tmp_path / cfg.run.name, lambda: stopped.append(hit(ns, "collector", "actor", signal.SIGSTOP)))
    path = train(cfg)
    acc = finished_whole(path, steps=2)
    assert stopped and acc["restarts"]["collector"] == 1 and acc["restarts"]["run"] == 0
    rollbacks = [e for e in map(json.loads, (path / "events.jsonl").read_text().splitlines()) if e["event"] == "rollback"]
    assert [(e["role"], e["cause"]) for e in rollbacks] == [
        ("collector", "did not answer within 10 s (hung; deadlines.* in the config)")]
    dump = capfd.readouterr().out.split("rollback: collector did not answer within 10 s")[1]
    assert re.match(r"[^\n]*\n  driver: waiting on collector\.(snapshot|next_batch|accounting|set_version)\n", dump)
    assert "  engine: " in dump and "episode actors: 4 playing" in dump


@pytest.mark.slow
def test_killed_or_hung_sandboxes_cost_their_episodes_not_the_run(ray_session, swerve_cache, tmp_path):
    """In one run: a sandbox actor killed, one that stops answering (found when a call outlives
    its time limit plus deadlines.sandbox_margin_s) and one whose command is stopped. The first
    two fail their episodes as infra_error(sandbox), which are re-run; the stopped command is
    ended by its own timeout, like any command that hangs."""
    cfg = small(tmp_path, swerve_cache, "sandboxes", *SANDBOX_FAULT_DEADLINES)
    ns = f"swerve-{cfg.run.name}"
    faults = (("sandbox-0", "actor", signal.SIGKILL), ("sandbox-1", "actor", signal.SIGSTOP),
              ("sandbox-2", "command", signal.SIGSTOP))
    hit_pids = []
    AfterStep(tmp_path / cfg.run.name, lambda: hit_pids.extend(hit(ns, *fault) for fault in faults))
    acc = finished_whole(train(cfg))
    assert len(hit_pids) == 3 and acc["restarts"]["collector"] == acc["restarts"]["trainer"] == 0
    assert acc["infra_excluded"] >= 2  # the episodes the two actors held were not scored, and were re-run
    for pid in hit_pids:  # nothing that was hit is left behind
        with pytest.raises(ProcessLookupError):
            for _ in range(100):
                os.kill(pid, 0)
                time.sleep(0.1)


@pytest.mark.slow
def test_a_corrupt_newest_checkpoint_is_skipped_when_the_run_heals(ray_session, swerve_cache, tmp_path, caplog):
    """Step 2's checkpoint is damaged, then a trainer shard is killed (SIGKILL): the run rebuilds
    the fleet, rolls back to step 1's checkpoint (warning about step 2's) and still trains every
    step once."""
    cfg = small(tmp_path, swerve_cache, "corrupt-ckpt", "trainer.total_steps=4")
    run = tmp_path / cfg.run.name
    step2 = run / "checkpoints" / step_dir_name(2)

    def corrupt_then_kill():
        model = next(p for p in sorted(step2.iterdir()) if p.suffix in (".pt", ".safetensors"))
        with open(model, "r+b") as f:
            f.seek(model.stat().st_size // 2)
            f.write(b"\x00" * 64)
        hit(f"swerve-{cfg.run.name}", "trainer-0", "actor", signal.SIGKILL)

    act = AfterStep(run, corrupt_then_kill, step=2, ready=lambda: (step2 / "meta.json").exists())
    with caplog.at_level(logging.WARNING):
        acc = finished_whole(train(cfg), steps=4)
    assert act.acted_at is not None and acc["restarts"]["trainer"] == 1 and acc["heal_s"]["trainer"][0] > 0
    assert any(step_dir_name(2) in r.getMessage() and "not usable" in r.getMessage() for r in caplog.records)
