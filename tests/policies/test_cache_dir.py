import os

from policies.cache_dir import build_once, content_hash


def test_content_hash_is_order_independent_and_sensitive():
    assert content_hash({"a": 1, "b": 2}) == content_hash({"b": 2, "a": 1})
    assert content_hash({"a": 1}) != content_hash({"a": 2})


def test_build_once_builds_then_reuses(tmp_path):
    final_dir = str(tmp_path / "things" / "abc")
    calls = []

    def build(tmp_dir):
        calls.append(tmp_dir)
        with open(os.path.join(tmp_dir, "f.txt"), "w") as handle:
            handle.write("x")

    assert build_once(final_dir, build) == final_dir
    assert build_once(final_dir, build) == final_dir
    assert len(calls) == 1
    assert os.listdir(final_dir) == ["f.txt"]
    assert os.listdir(tmp_path / "things") == ["abc"]  # no temp dir left behind


def test_build_once_loses_race_gracefully(tmp_path):
    final_dir = str(tmp_path / "abc")

    def build_while_another_process_wins(tmp_dir):
        with open(os.path.join(tmp_dir, "mine.txt"), "w") as handle:
            handle.write("mine")
        os.makedirs(final_dir)
        with open(os.path.join(final_dir, "theirs.txt"), "w") as handle:
            handle.write("theirs")

    assert build_once(final_dir, build_while_another_process_wins) == final_dir
    assert os.listdir(final_dir) == ["theirs.txt"]
    assert os.listdir(tmp_path) == ["abc"]
