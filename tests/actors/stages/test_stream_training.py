"""Training on an endless stream (tasks.split=stream): a real run draws fresh tasks, each rolled out
as one group, from bugs injected into a repository the suite does not ship, and the books balance.
The micro generator's stream, resumed without drawing a task twice: the pipeline's RL stage
(tests/actors/stages/test_pipeline.py, two segments on the stream)."""
import json
import textwrap
from pathlib import Path

import pytest

from actors.stages.driver import train
from actors.training.sample_collector import COUNTERS
from configs import load_config

pytestmark = pytest.mark.slow  # training runs

IDENTITY = COUNTERS[1:]


def _cfg(tmp_path, swerve_cache, name, *extra):
    return load_config("tests/smoke.yaml", [
        f"run.dir={tmp_path}", f"run.name={name}", f"model.cache_dir={swerve_cache}",
        f"tokenizer.cache_dir={swerve_cache}", "rollout.max_turns=2", "rollout.max_tokens_per_turn=16",
        "rollout.task_selection=pass_rate", "tasks.split=stream", "trainer.checkpoint_interval=1", *extra])


def _trained_tasks(run: Path) -> list[tuple[int, str]]:
    """(group id, task id) of every trained trajectory."""
    rows = [json.loads(line) for f in sorted((run / "trajectories").glob("*.jsonl"))
            for line in f.read_text().splitlines()]
    return [(row["group_id"], row["task_id"]) for row in rows]


def _one_task_per_group(pairs):
    groups: dict[str, set] = {}
    for group, task in pairs:
        groups.setdefault(task, set()).add(group)
    return all(len(g) == 1 for g in groups.values())


LIBRARY = textwrap.dedent('''\
    def scale(values, factor):
        return [v * factor for v in values]


    def first_over(values, limit):
        for v in values:
            if v > limit:
                return v
        return None


    def span(values):
        return max(values) - min(values)
''')

LIBRARY_TESTS = textwrap.dedent('''\
    from gauge.ops import first_over, scale, span


    def test_scale():
        assert scale([1, 2], 3) == [3, 6]


    def test_first_over():
        assert first_over([1, 5, 9], 4) == 5


    def test_first_over_none():
        assert first_over([1, 2], 4) is None


    def test_span():
        assert span([4, 9, 2]) == 7
''')


def test_a_run_on_a_repository_stream_trains_on_bugs_injected_into_it(ray_session, tmp_path, swerve_cache,
                                                                      monkeypatch):
    monkeypatch.setenv("SWERVE_CACHE_DIR", str(tmp_path / "tasks"))
    repo = tmp_path / "gauge"  # a library this project does not ship
    (repo / "gauge").mkdir(parents=True)
    (repo / "gauge" / "__init__.py").write_text("")
    (repo / "gauge" / "ops.py").write_text(LIBRARY)
    (repo / "tests").mkdir()
    (repo / "tests" / "test_ops.py").write_text(LIBRARY_TESTS)
    run = train(_cfg(tmp_path, swerve_cache, "synth", f"tasks.source={repo}", "tasks.format=synth",
                     "trainer.total_steps=1", "tasks.stream_lookahead=3", "run.trajectories_per_step=64"))
    trained = _trained_tasks(run)
    assert trained and all(task.startswith("gauge.") for _, task in trained) and _one_task_per_group(trained)
    acc = json.loads((run / "accounting.json").read_text())
    assert acc["admitted"] == sum(acc[k] for k in IDENTITY) and acc["infra_excluded"] == 0
    kinds = acc["admission"]["kinds"]
    assert kinds and all(kind.split("/")[0] for kind in kinds)  # judged by the mutation's family
