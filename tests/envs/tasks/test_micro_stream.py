"""The micro stream: endless, seeded, and never the same task as one of the finite splits."""
import re
from collections import Counter

import pytest

from configs.schema import SandboxConfig, SWEEnvConfig, TasksConfig
from envs.tasks import micro
from envs.tasks.loaders import load_tasks
from envs.tasks.stream_sources import open_stream
from envs.tasks.micro_stream import MicroStream
from envs.tasks.stream import STREAM_SPLIT
from envs.validate import OK, trainable_tasks, validate_task

DRAWN = 1500  # stream tasks checked against the splits: 15x the eval split


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SWERVE_CACHE_DIR", str(tmp_path / "cache"))


def _name(statement: str) -> str:
    return re.match(r"(\w+) returns", statement).group(1)


@pytest.mark.slow
def test_rl_tasks_and_eval_tasks_never_coincide_by_content():
    stream = MicroStream(seed=0)
    drawn = [stream.task(i) for i in range(DRAWN)]
    for split in ("eval", "train"):  # held-out tasks, and the tasks SFT traces come from
        finite = load_tasks("micro", split)
        modules = {open(f"{t.workspace_dir}/{micro.MODULE}").read() for t in finite}
        tests = {dict(t.test_files)[micro.TEST_MODULE] for t in finite}
        issues = {t.problem_statement for t in finite}
        assert not [t.id for t in drawn if open(f"{t.workspace_dir}/{micro.MODULE}").read() in modules], split
        assert not [t.id for t in drawn if dict(t.test_files)[micro.TEST_MODULE] in tests], split
        assert not [t.id for t in drawn if t.problem_statement in issues], split
    # By construction too: no function to fix has an eval task's name.
    assert not {_name(t.problem_statement) for t in drawn} & {_name(t.problem_statement) for t in load_tasks("micro", "eval")}


@pytest.mark.slow
def test_a_draw_that_repeats_a_split_task_is_drawn_again(monkeypatch):
    stream = MicroStream(seed=0)
    first = stream.draw(3)
    stream._taken |= micro.content_keys(first)  # as if a finite split held this very task
    again = stream.draw(3)
    assert again.files != first.files and again.family == first.family and again.stratum == first.stratum


@pytest.mark.slow
def test_the_same_index_is_the_same_task_and_seeds_differ():
    a, b, other = MicroStream(seed=0), MicroStream(seed=0), MicroStream(seed=1)
    for index in (0, 7, 123456):
        assert a.draw(index) == b.draw(index)
        assert a.draw(index).files != other.draw(index).files
    task = a.task(42)
    assert task.id == "micro-stream-0-0000042" and task.split == STREAM_SPLIT and task.source == "micro"
    assert a.index_of(task.id) == 42 and b.index_of(task.id) == 42
    for foreign in ("micro-eval-003", "micro-stream-1-0000042", "micro-stream-0-x"):
        with pytest.raises(ValueError, match="not a task of the micro stream"):
            a.index_of(foreign)


@pytest.mark.slow
def test_families_come_in_turn_and_strata_keep_the_splits_mix():
    stream = MicroStream(seed=0)
    drawn = [stream.draw(i) for i in range(1000)]
    assert [t.family for t in drawn[:10]] == list(micro.FAMILIES) * 2
    easy = Counter(t.stratum for t in drawn)["easy"] / len(drawn)
    assert abs(easy - micro.EASY_FRACTION) < 0.05


def test_a_run_opens_the_stream_by_split_and_lists_refuse_it():
    stream, quarantined = trainable_tasks(TasksConfig(source="micro", split=STREAM_SPLIT, stream_seed=5))
    assert isinstance(stream, MicroStream) and stream.seed == 5 and quarantined == {}
    assert stream.available() is None and not stream.finished()
    with pytest.raises(ValueError, match="endless"):
        load_tasks("micro", STREAM_SPLIT)
    with pytest.raises(ValueError, match="has no stream"):
        open_stream(TasksConfig(source="builtin", split=STREAM_SPLIT))


@pytest.mark.slow
def test_stream_tasks_pass_the_sanity_gate(make_sandbox):
    stream = MicroStream(seed=0)
    tasks = [stream.task(i) for i in range(len(micro.FAMILIES))]  # one per family
    results = [validate_task(task, make_sandbox, 60.0, SWEEnvConfig.listing_timeout_s, SandboxConfig()) for task in tasks]
    assert [r.verdict for r in results] == [OK] * len(tasks), [r.reason for r in results]
