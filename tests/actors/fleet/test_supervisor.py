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

from actors.stages.driver import train
from actors.training.sample_collector import COUNTERS
from actors.cluster.roles import RoleFailure
from actors.fleet.supervisor import RunAborted, Supervisor, role_kind
from bench.resilience.reliability import SANDBOX_FAULT_DEADLINES
from bench.resilience.role_faults import AfterStep, actor_pid, hit, server_pid
from configs import load_config
from configs.schema import RunConfig
from policies.training.checkpoint import step_dir_name

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


def gone(pid: int) -> bool:
    """The process ended within 10 s."""
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_killed_and_hung_roles_without_state_are_replaced_where_they_are_and_the_run_goes_on(
        ray_session, swerve_cache, tmp_path):
    """In one run, after its first step: an episode actor killed, a sandbox actor killed, one that
    stops answering (found when a call outlives its time limit plus deadlines.sandbox_margin_s),
    one whose command is stopped, and the engine's server stopped (found by its health probes).
    Each is replaced where it died and its episodes re-run (the stopped command is ended by its own
    timeout, like any command that hangs); nothing rolls back."""
    cfg = small(tmp_path, swerve_cache, "stateless", *SANDBOX_FAULT_DEADLINES, "deadlines.engine_health_s=3",
                "engine.health_interval_s=1")
    ns = f"swerve-{cfg.run.name}"
    faults = (("episode-3", "actor", signal.SIGKILL), ("sandbox-0", "actor", signal.SIGKILL),
              ("sandbox-1", "actor", signal.SIGSTOP), ("sandbox-2", "command", signal.SIGSTOP),
              ("engine-0", "server", signal.SIGSTOP))
    hit_pids = []
    AfterStep(tmp_path / cfg.run.name, lambda: hit_pids.extend(hit(ns, *fault) for fault in faults))
    acc = finished_whole(train(cfg))
    assert len(hit_pids) == len(faults)
    assert acc["restarts"]["collector"] == acc["restarts"]["trainer"] == acc["restarts"]["run"] == 0
    assert acc["restarts"]["episode"] >= 1 and acc["restarts"]["engine"] >= 1
    assert acc["infra_excluded"] >= 2  # the episodes the two sandbox actors held were not scored, and were re-run
    assert [pid for pid in hit_pids if not gone(pid)] == []  # nothing that was hit is left behind


@pytest.mark.slow
def test_killed_stateful_roles_roll_back_to_the_newest_usable_checkpoint(ray_session, swerve_cache, tmp_path, caplog):
    """The collector killed (SIGKILL) after step 1: the run rebuilds the fleet from step 1's
    checkpoint. Then step 2's checkpoint is damaged and a trainer shard killed: the run rolls back
    to step 1's checkpoint again (warning about step 2's) and still trains every step once."""
    cfg = small(tmp_path, swerve_cache, "killed", "trainer.total_steps=4")
    run = tmp_path / cfg.run.name
    ns = f"swerve-{cfg.run.name}"
    step2 = run / "checkpoints" / step_dir_name(2)

    def corrupt_then_kill():
        model = next(p for p in sorted(step2.iterdir()) if p.suffix in (".pt", ".safetensors"))
        with open(model, "r+b") as f:
            f.seek(model.stat().st_size // 2)
            f.write(b"\x00" * 64)
        hit(ns, "trainer-0", "actor", signal.SIGKILL)

    collector = AfterStep(run, lambda: hit(ns, "collector", "actor", signal.SIGKILL))
    trainer = AfterStep(run, corrupt_then_kill, step=2,
                        ready=lambda: collector.acted_at is not None and (step2 / "meta.json").exists())
    with caplog.at_level(logging.WARNING):
        acc = finished_whole(train(cfg), steps=4)
    assert collector.acted_at is not None and trainer.acted_at is not None
    assert acc["restarts"]["collector"] == 1 and acc["restarts"]["trainer"] == 1
    assert acc["heal_s"]["collector"][0] > 0 and acc["heal_s"]["trainer"][0] > 0
    assert any(step_dir_name(2) in r.getMessage() and "not usable" in r.getMessage() for r in caplog.records)


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


HUNG = "(hung; deadlines.* in the config)"


@pytest.mark.slow
def test_hung_stateful_roles_are_found_by_their_deadlines_and_the_run_rolls_back(ray_session, swerve_cache, tmp_path,
                                                                                 capfd):
    """The collector stopped (SIGSTOP) after step 1: the driver's next call to it never returns (a
    book call, or the snapshot of step 1's checkpoint), the collector's handle ends the wait at its
    deadline, names the role and the run rolls back. (The watchdog cannot be the one: it reads the
    books from that same collector.) Then a trainer shard stopped after step 2: met in step 3's
    update or in its checkpoint, found by that call's deadline, and the run rolls back again."""
    # Deadlines several times a healthy call's longest here (~1-2 s under load; at 6 s a loaded CI
    # machine once rolled a healthy collector back too): each hang costs one.
    cfg = small(tmp_path, swerve_cache, "hung", "deadlines.collector_call_s=10", "deadlines.checkpoint_s=10",
                "deadlines.train_step_s=12")
    run = tmp_path / cfg.run.name
    ns = f"swerve-{cfg.run.name}"
    collector = AfterStep(run, lambda: hit(ns, "collector", "actor", signal.SIGSTOP))
    trainer = AfterStep(run, lambda: hit(ns, "trainer-0", "actor", signal.SIGSTOP), step=2,
                        ready=lambda: collector.acted_at is not None)
    path = train(cfg)
    acc = finished_whole(path)
    assert collector.acted_at is not None and trainer.acted_at is not None
    assert acc["restarts"]["collector"] == 1 and acc["restarts"]["trainer"] == 1 and acc["restarts"]["run"] == 0
    rollbacks = [e for e in map(json.loads, (path / "events.jsonl").read_text().splitlines()) if e["event"] == "rollback"]
    # The trainer is met in step 2's checkpoint (checkpoint_s) or step 3's update (train_step_s),
    # whichever the stop lands before: both end the wait at their own deadline.
    assert [(e["role"], e["cause"]) for e in rollbacks] in [
        [("collector", f"did not answer within 10 s {HUNG}"), ("trainer-0", f"did not answer within {s} s {HUNG}")]
        for s in (10, 12)]
    dump = capfd.readouterr().out.split("rollback: collector did not answer within 10 s")[1]
    assert re.match(r"[^\n]*\n  driver: waiting on collector\.(snapshot|next_batch|accounting|set_version)\n", dump)
    assert "  engine: " in dump and "episode actors: 4 playing" in dump
