from actors.cluster.roles import RoleFailure
from actors.fleet.watchdog import Watchdog, failure_dump, stall_dump


def books(admitted, in_flight, buffered=0, trained=0, infra_excluded=0):
    return {"admitted": admitted, "in_flight": in_flight, "buffered": buffered, "trained": trained,
            "dropped_stale": 0, "infra_excluded": infra_excluded, "version": 3, "groups_admitted": 2}


def test_a_run_with_work_in_flight_and_nothing_finishing_is_stalled_after_progress_s():
    dog = Watchdog(progress_s=60.0, now_s=0.0)
    assert dog.stalled_s(books(8, 8), 0.0) is None
    assert dog.stalled_s(books(8, 8), 59.0) is None
    assert dog.stalled_s(books(8, 8), 61.0) == 61.0


def test_a_finished_trajectory_or_a_step_resets_the_clock():
    dog = Watchdog(progress_s=60.0, now_s=0.0)
    dog.stalled_s(books(8, 8), 0.0)
    assert dog.stalled_s(books(9, 8, buffered=1), 50.0) is None  # one scored trajectory finished
    assert dog.stalled_s(books(9, 8, buffered=1), 100.0) is None  # 50 s since that
    assert dog.stalled_s(books(9, 8, buffered=1), 111.0) == 61.0
    dog.step_done(111.0)
    assert dog.stalled_s(books(9, 8, buffered=1), 150.0) is None
    # Nothing in flight and no batch coming (admission stuck) is a stall too.
    assert dog.stalled_s(books(17, 0, trained=1), 160.0) is None  # the buffered one was trained: no news
    assert dog.stalled_s(books(17, 0, trained=1), 230.0) == 119.0


def test_infra_errors_are_no_progress():
    # An engine that fails every call fast: episodes keep finishing, as infra errors, re-run forever.
    dog = Watchdog(progress_s=60.0, now_s=0.0)
    dog.stalled_s(books(8, 8, buffered=2), 0.0)
    for t in range(1, 7):
        assert dog.stalled_s(books(8 + 10 * t, 8, buffered=2, infra_excluded=10 * t), 10.0 * t) == (60.0 if t == 6 else None)


def test_the_dump_says_who_waits_on_what():
    text = stall_dump(books(8, 8, 1), [{"index": 0, "running": 4, "queued": 12, "history": [1]}], 4, 3600.0)
    assert "3600 s" in text and "collector.next_batch" in text and "in_flight=8" in text
    assert "engine: index=0 queued=12 running=4" in text and "history" not in text


def test_every_rollback_dumps_the_call_that_failed_and_the_fleet():
    text = failure_dump(RoleFailure("trainer-1", "did not answer within 20 s", "train_step"),
                        [{"index": 0, "running": 2, "queued": 0}], 4)
    assert text.splitlines()[:2] == ["rollback: trainer-1 did not answer within 20 s", "  driver: waiting on trainer-1.train_step"]
    assert "episode actors: 4 playing" in text and "engine: index=0 queued=0 running=2" in text
