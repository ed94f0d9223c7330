"""The synth task stream (envs/tasks/synth/stream.py) on a tiny repository written here: real pytest runs,
rows cached in a file that another instance (or process) reads and resumes after."""

import pickle
import re
import shutil
import subprocess
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from configs.schema import SynthConfig
from envs.tasks.synth.injector import synthesize
from envs.tasks.synth.pytest_run import run_pytest
from envs.tasks.synth.stream import StreamError, SynthStream

CORE = textwrap.dedent('''\
    def clip(value, low, high):
        if value < low:
            return low
        if value > high:
            return high
        return value


    def mean(values):
        return sum(values) / len(values)


    def count_over(values, limit):
        n = 0
        for v in values:
            if v > limit:
                n += 1
        return n
''')

CORE_TESTS = textwrap.dedent('''\
    from tally.core import clip, count_over, mean


    def test_clip_low():
        assert clip(-3, 0, 9) == 0


    def test_clip_high():
        assert clip(12, 0, 9) == 9


    def test_clip_inside():
        assert clip(4, 0, 9) == 4


    def test_mean():
        assert mean([2, 4, 9]) == 5


    def test_count_over():
        assert count_over([1, 5, 7, 2], 4) == 2
''')

CFG = SynthConfig(seed=0)
MADE = 4  # rows the module fixture's stream makes


def write_repo(root: Path, name: str, files: dict) -> Path:
    repo = root / name
    for relative, text in files.items():
        (repo / relative).parent.mkdir(parents=True, exist_ok=True)
        (repo / relative).write_text(text)
    return repo


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The tally repository and a cache holding the stream's first MADE rows."""
    root = tmp_path_factory.mktemp("synth-stream")
    repo = write_repo(root, "tally", {"tally/__init__.py": "", "tally/core.py": CORE,
                                      "tests/test_core.py": CORE_TESTS})
    stream = SynthStream(str(repo), CFG, str(root / "cache"), lookahead=1)
    ids = [stream.task(i).id for i in range(MADE - 1)]  # lookahead 1: MADE rows wanted
    close_when_made(stream, MADE)
    rows = [stream.row(i) for i in range(MADE)]
    assert [row["instance_id"] for row in rows[:MADE - 1]] == ids
    assert len(stream.rows_file.read_text().splitlines()) == MADE  # never more than wanted
    return repo, root / "cache", rows


def close_when_made(stream: SynthStream, count: int) -> None:
    """Close the stream once its thread made the `count` rows it was asked for: closed earlier, it
    would stop short of them."""
    deadline = time.monotonic() + 120
    while stream.available() < count:
        assert time.monotonic() < deadline, f"{stream.available()} of {count} rows after 120 s"
        time.sleep(0.05)
    stream.close()


def cache_copy(made, tmp_path) -> str:
    shutil.copytree(made[1], tmp_path / "cache")
    return str(tmp_path / "cache")


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The folder temporary working copies go to, to check that none is left behind."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def key(row):
    return row["instance_id"], row["patch"], row["FAIL_TO_PASS"], row["PASS_TO_PASS"]


@pytest.mark.slow
def test_cached_rows_are_read_back_and_resumed_in_order(made, tmp_path, private_tmp):
    repo, _, rows = made
    cache = cache_copy(made, tmp_path)
    again = SynthStream(str(repo), CFG, cache, lookahead=1)
    assert again.source == str(repo.resolve())
    # Row MADE - 2 with lookahead 1 wants MADE rows: all in the file.
    assert [key(again.row(i)) for i in range(MADE - 1)] == [key(row) for row in rows[:MADE - 1]]
    assert again.available() == MADE and not again.finished()
    assert again.stats == {}  # read from the file: no synthesis ran

    assert again.index_of(rows[2]["instance_id"]) == 2
    with pytest.raises(ValueError, match="'tally.0000beef' is not a task"):
        again.index_of("tally.0000beef")

    # Beyond the file: the generator resumes after its rows, passing their candidates over.
    resumed = again.task(MADE + 2)  # lookahead 1: MADE + 4 rows wanted
    close_when_made(again, MADE + 4)
    fresh = SynthStream(str(repo), CFG, str(tmp_path / "fresh"), lookahead=1)
    assert fresh.task(MADE + 2).id == resumed.id
    close_when_made(fresh, MADE + 4)
    assert [key(again.row(i)) for i in range(MADE + 4)] == [key(fresh.row(i)) for i in range(MADE + 4)]
    assert key(again.row(MADE - 1)) == key(rows[MADE - 1])
    assert again.stats["kept"] == fresh.stats["kept"] == MADE + 4
    assert again.stats["tried"] == fresh.stats["tried"]  # the replay counts tries as the first run did
    assert again.stats["replayed"] > 0 and fresh.stats["replayed"] == 0
    assert again.index_of(resumed.id) == MADE + 2
    assert list(private_tmp.iterdir()) == []  # closed: the working copies are gone


@pytest.mark.slow
def test_workspace_has_the_bug_and_the_gold_patch_fixes_it(made, tmp_path):
    repo, _, rows = made
    stream = SynthStream(str(repo), CFG, cache_copy(made, tmp_path), lookahead=1)
    task = stream.task(0)
    assert task.id == rows[0]["instance_id"] and task.split == "stream" and task.fail_to_pass
    assert ("tests/test_core.py", CORE_TESTS) in task.test_files
    assert Path(task.workspace_dir).is_relative_to(tmp_path / "cache")  # workspaces live in the cache too
    copy = tmp_path / "work"
    shutil.copytree(task.workspace_dir, copy)
    tests = list(task.fail_to_pass + task.pass_to_pass)
    buggy = run_pytest(copy, 60, extra_args=tests)
    assert not buggy.passed & set(task.fail_to_pass), buggy.output[-2000:]
    assert buggy.passed == set(task.pass_to_pass), buggy.output[-2000:]
    subprocess.run(["patch", "-p1", "-s", "--no-backup-if-mismatch"], input=task.gold_patch, text=True,
                   cwd=copy, check=True)
    fixed = run_pytest(copy, 60, extra_args=tests)
    assert fixed.passed == set(tests), fixed.output[-2000:]
    assert stream.stats == {}
    stream.close()


@pytest.mark.slow
def test_stream_tasks_carry_their_rows_hidden_cases(made, tmp_path):
    repo, _, rows = made
    stream = SynthStream(str(repo), CFG, cache_copy(made, tmp_path), lookahead=1)
    tasks = [stream.task(i) for i in range(MADE - 1)]
    stream.close()
    assert all(task.hidden_cases for task in tasks)
    for task, row in zip(tasks, rows):
        carried = [{"module": c.module, "function": c.function, "args_json": c.args_json,
                    "expected_json": c.expected_json} for c in task.hidden_cases]
        assert carried == row["hidden_cases"] and carried[0]["module"] == "tally.core"


@pytest.mark.slow
def test_excluded_patches_are_never_handed_out(made, tmp_path):
    repo, cache, rows = made
    held_out = synthesize(repo, SynthConfig(seed=0, num_tasks=2))  # what `swerve tasks synth` writes
    assert [key(row) for row in held_out] == [key(row) for row in rows[:2]]  # the stream's first rows
    stream = SynthStream(str(repo), CFG, str(cache), lookahead=1,
                         exclude_patches=[row["patch"] for row in held_out])
    assert stream.task(0).id == rows[2]["instance_id"]
    assert stream.rows_file != SynthStream(str(repo), CFG, str(cache), lookahead=1).rows_file
    for row in held_out:
        with pytest.raises(ValueError, match="is not a task"):
            stream.index_of(row["instance_id"])
    stream.close()


@pytest.mark.slow
def test_a_copy_made_by_pickle_makes_tasks(made, tmp_path):
    repo, _, rows = made
    stream = SynthStream(str(repo), CFG, cache_copy(made, tmp_path), lookahead=1)
    assert stream.task(0).id == rows[0]["instance_id"]
    stream.want(MADE + 1)  # its thread runs while it is pickled
    copy = pickle.loads(pickle.dumps(stream))
    stream.close()
    assert copy.task(1).id == rows[1]["instance_id"]
    made_there = copy.task(MADE)
    close_when_made(copy, MADE + 2)
    assert copy.stats["kept"] == MADE + 2 and copy.index_of(made_there.id) == MADE


@pytest.mark.slow
def test_two_streams_on_one_file_write_each_row_once(made, tmp_path):
    repo, _, rows = made
    cache = str(tmp_path / "cache")
    streams = [SynthStream(str(repo), CFG, cache, lookahead=1) for _ in range(2)]
    # Both make rows at once; the one that finds the file grew resumes after the other's rows.
    threads = [threading.Thread(target=stream.task, args=(MADE - 2,)) for stream in streams]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for stream in streams:
        close_when_made(stream, MADE)
    assert len(streams[0].rows_file.read_text().splitlines()) == MADE
    for stream in streams:
        assert [stream.row(i)["instance_id"] for i in range(MADE)] == [row["instance_id"] for row in rows]


@pytest.mark.slow
def test_a_repository_without_passing_tests_fails_clearly(tmp_path, private_tmp):
    repo = write_repo(tmp_path, "broken", {"broken/__init__.py": "def one():\n    return 1\n",
                                           "tests/test_one.py": "def test_one():\n    assert False\n"})
    stream = SynthStream(str(repo), CFG, str(tmp_path / "cache"), lookahead=1)
    expected = f"synth stream of {repo.resolve()} failed: SynthError: baseline: only 0 reliably passing"
    with pytest.raises(StreamError, match=re.escape(expected)):
        stream.task(0)
    with pytest.raises(StreamError, match="reliably passing"):
        stream.available()
    stream.close()
    assert list(private_tmp.iterdir()) == []


@pytest.mark.slow
def test_a_stream_ends_when_its_mutations_run_out(tmp_path):
    repo = write_repo(tmp_path, "tiny", {
        "tiny/__init__.py": 'NAME = "tiny"\n\n\ndef double(x):\n    return x * 2\n',
        "tests/test_tiny.py": ("from tiny import NAME, double\n\n\ndef test_double():\n    assert double(3) == 6\n\n\n"
                               "def test_name():\n    assert NAME == 'tiny'\n")})
    stream = SynthStream(str(repo), CFG, str(tmp_path / "cache"), lookahead=1)
    with pytest.raises(IndexError, match="ended after"):
        stream.task(50)
    count = stream.available()
    assert stream.finished() and 0 < count == stream.stats["kept"]
    stream.close()
    again = SynthStream(str(repo), CFG, str(tmp_path / "cache"), lookahead=1)
    assert again.finished() and again.available() == count and again.stats == {}
    with pytest.raises(IndexError, match=f"ended after {count} tasks"):
        again.task(count)


def test_settings_are_checked():
    with pytest.raises(ValueError, match="lookahead is 0"):
        SynthStream(".", CFG, lookahead=0)


def test_a_run_config_keeps_held_out_rows_out_of_its_repository_stream(tmp_path):
    from configs.schema import TasksConfig
    from envs.tasks.stream_sources import open_stream

    repo = write_repo(tmp_path, "tally", {"tally/__init__.py": "", "tally/core.py": CORE, "tests/test_core.py": CORE_TESTS})
    rows = tmp_path / "held_out.jsonl"
    rows.write_text('{"instance_id": "held.1", "patch": "--- a/x\\n+++ b/x\\n"}\n')
    stream = open_stream(TasksConfig(source=str(repo), format="synth", split="stream", stream_seed=3,
                                     stream_held_out=[str(rows)]))
    assert isinstance(stream, SynthStream) and stream.cfg.seed == 3
    assert stream.exclude_patches == {"--- a/x\n+++ b/x\n"}
    rows.write_text('{"instance_id": "held.2"}\n')
    with pytest.raises(ValueError, match="stream_held_out.*not a SWE-smith row with a patch"):
        open_stream(TasksConfig(source=str(repo), format="synth", split="stream", stream_held_out=[str(rows)]))
