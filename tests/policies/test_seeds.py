"""derive_seed: stable across processes, in range, and a different seed for every stream."""
import subprocess
import sys

from policies.seeds import SEED_LIMIT, derive_seed


def test_seeds_are_in_range_for_any_integers():
    for args in [(0,), (0, 0), (-5, 3), (2**63 - 1, 2**70), (SEED_LIMIT, -1, 7)]:
        assert 0 <= derive_seed(*args) < SEED_LIMIT


def test_the_same_stream_gets_the_same_seed_in_another_process():
    code = "from policies.seeds import derive_seed; print(derive_seed(12345, 6, 7))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(other) == derive_seed(12345, 6, 7)


def test_streams_that_linear_mixing_would_merge_stay_apart():
    # base * 1009 + part gave (1, 0) and (0, 1009) one seed; more parts also name another stream.
    streams = [(1, 0), (0, 1009), (0, 1), (1,), (0, 1, 0), (0, 10), (0, 1, 0, 0)]
    assert len({derive_seed(*s) for s in streams}) == len(streams)
    assert len({derive_seed(7, turn) for turn in range(1000)}) == 1000
