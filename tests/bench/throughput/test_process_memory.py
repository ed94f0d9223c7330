"""memory_by_kind: a child's own memory lands in its kind, an ended process reads as None."""
import os
import subprocess
import sys

from bench.throughput.process_memory import memory_by_kind, process_memory_mb

HOLD_MB = 48


def test_a_child_that_holds_memory_is_counted_under_its_parents_commands():
    # The child touches HOLD_MB of its own heap, then says so and waits to be killed.
    code = f"import sys; b = bytearray({HOLD_MB} << 20); print('ready', flush=True); sys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"ready\n"
        kinds = memory_by_kind(os.getpid())
        own = process_memory_mb(child.pid)
    finally:
        child.kill()
        child.wait()
    assert kinds["driver"]["processes"] == 1
    commands = kinds["commands of driver"]  # the child (and whatever else this process started)
    assert commands["processes"] >= 1
    assert HOLD_MB <= commands["uss_mb"] <= commands["rss_mb"] and commands["anon_mb"] >= HOLD_MB
    assert commands["pss_mb"] <= commands["rss_mb"]
    assert own["uss_mb"] >= HOLD_MB
    assert process_memory_mb(child.pid) is None  # reaped: nothing left to read
