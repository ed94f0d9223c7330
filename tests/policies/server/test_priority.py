"""Priority scheduling in the CPU server (SGLang's --enable-priority-scheduling): larger
`priority` is served first, a full batch yields its lowest row to a much higher waiting
request, and without it the queue keeps arrival order."""
from __future__ import annotations

import time

import pytest

from policies.engines import protocol
from policies.server.request import Request
from policies.server.scheduler import Scheduler


def request(priority, tokens, finished):
    return Request([5, 17, 42], protocol.SamplingParams(max_new_tokens=tokens, temperature=0.0, ignore_eos=True),
                   priority=priority, on_done=lambda r: finished.append(r.rid))


def wait_for(predicate, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert predicate()


@pytest.fixture()
def scheduler_for(model):
    made = []

    def make(threshold):
        made.append(Scheduler(model, max_batch_size=1, max_context_tokens=512, prefix_cache_tokens=0,
                              priority_preemption_threshold=threshold))
        return made[-1]
    yield make
    for s in made:
        s.stop()


def test_the_queue_is_served_by_priority_then_arrival(scheduler_for):
    scheduler, finished = scheduler_for(10**9), []  # no preemption: only the queue order counts
    scheduler.pause(protocol.PAUSE_IN_PLACE).result(timeout=30)  # all queue up before any runs
    for rid, priority in [("low", -50), ("none", None), ("high", 7), ("mid-a", 0), ("mid-b", 0)]:
        r = request(priority, 2, finished)
        r.rid = rid
        scheduler.submit(r)
    scheduler.resume().result(timeout=30)
    wait_for(lambda: len(finished) == 5)
    assert finished == ["high", "mid-a", "mid-b", "low", "none"]


@pytest.mark.parametrize("threshold,first", [(10, "urgent"), (10**9, "running")])
def test_a_full_batch_yields_its_lowest_row_to_a_much_higher_request(scheduler_for, threshold, first):
    scheduler, finished = scheduler_for(threshold), []
    running = request(0, 300, finished)
    running.rid = "running"
    scheduler.submit(running)
    wait_for(lambda: len(running.output_ids) >= 5)
    urgent = request(100, 3, finished)
    urgent.rid = "urgent"
    scheduler.submit(urgent)
    wait_for(lambda: len(finished) == 2)
    assert finished[0] == first
    # The preempted row resumed from its tokens so far: nothing lost, nothing repeated.
    assert len(running.output_ids) == 300 and len(running.versions) == 300


def test_without_priority_scheduling_priorities_are_ignored(model):
    scheduler, finished = Scheduler(model, max_batch_size=1, max_context_tokens=512, prefix_cache_tokens=0), []
    try:
        scheduler.pause(protocol.PAUSE_IN_PLACE).result(timeout=30)
        for rid, priority in [("first", -5), ("second", 99)]:
            r = request(priority, 2, finished)
            r.rid = rid
            scheduler.submit(r)
        scheduler.resume().result(timeout=30)
        wait_for(lambda: len(finished) == 2)
        assert finished == ["first", "second"]
    finally:
        scheduler.stop()
