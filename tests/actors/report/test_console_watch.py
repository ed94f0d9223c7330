"""Which log lines reach the console: warnings and errors a human must see, once; never what a
run does on purpose (the lines below were copied from a real `make run`'s log)."""
from actors.report.console_watch import MAX_SURFACED, Watch

EXPECTED_CHATTER = [
    "2026-12-02 04:38:11,772\tWARNING authentication_token_setup.py:85 -- Token authentication is enabled for "
    "this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out.",
    "\x1b[33m(raylet)\x1b[0m WARNING: 8 PYTHON worker processes have been started on node: ce2a46 with address: "
    "192.0.2.2, which is 4x the maximum expected startup concurrency (2).",
    "\x1b[33m(raylet)\x1b[0m A worker died or was killed while executing a task by an unexpected system error. "
    "To troubleshoot the problem, check the logs for the dead worker. Lease ID: 1400",
    "Loading weights:   0%|          | 0/46 [00:00<?, ?it/s]",
    "\x1b[36m(EngineActor pid=5627)\x1b[0m engine 0: server died (code -9)",
    "[swerve] warning: printed by our own code, which already chose the console or the log",
    "[swerve] step 3/12 v3 reward=0.250 resolved=0.25 staleness_max=1",
]


def test_what_a_run_does_on_purpose_stays_in_the_log():
    watch = Watch()
    assert [out for line in EXPECTED_CHATTER for out in watch.feed(line)] == []


def test_an_unknown_warning_reaches_the_console_once_whatever_its_numbers():
    watch = Watch()
    first = watch.feed("\x1b[36m(EpisodeActor pid=9001)\x1b[0m WARNING: sandbox disk 91% full")
    assert first == ["WARNING: sandbox disk 91% full"]  # without Ray's prefix and colours
    assert watch.feed("\x1b[36m(EpisodeActor pid=9002)\x1b[0m WARNING: sandbox disk 97% full") == []
    assert watch.feed("/x/y.py:3: UserWarning: the tokenizer has no chat template") \
        == ["/x/y.py:3: UserWarning: the tokenizer has no chat template"]
    assert watch.feed("(raylet) node_manager.cc:1: Task was killed: the node is running low on memory") != []


def test_a_traceback_is_reported_by_its_exception_line():
    watch = Watch()
    lines = ["(TrainerShard pid=7) Traceback (most recent call last):",
             '(TrainerShard pid=7)   File "/x/trainer.py", line 3, in step',
             "(TrainerShard pid=7)     loss.backward()",
             "(TrainerShard pid=7)     ^^^^^^^^^^^^^^^",
             "(TrainerShard pid=7) torch.OutOfMemoryError: CUDA out of memory",
             "(TrainerShard pid=7) an ordinary line after it"]
    assert [out for line in lines for out in watch.feed(line)] == ["torch.OutOfMemoryError: CUDA out of memory"]


def test_an_exception_of_an_actor_ended_on_purpose_stays_in_the_log():
    watch = Watch()
    lines = ["Traceback (most recent call last):", '  File "/x/launch.py", line 9, in reap',
             "ray.exceptions.ActorDiedError: The actor died because its owner has died."]
    assert [out for line in lines for out in watch.feed(line)] == []


def test_a_flood_of_distinct_warnings_is_cut_short_with_one_line_saying_so():
    watch = Watch()
    out = [text for i in range(3 * MAX_SURFACED) for text in watch.feed(f"ERROR: failure kind {'x' * i}")]
    assert len(out) == MAX_SURFACED + 1 and "in the log" in out[-1]
