"""swerve eval: the unbiased pass@k estimator, the stratified subset, patch capture, and an
end-to-end run on the tiny random model."""
import json
import subprocess
from dataclasses import dataclass
from math import comb

import pytest

from actors.training.eval_queue import EvalQueue
from actors.stages.evaluate import (attempt_records, mean_pass_at_k, pass_at_k, predictions, stratified_subset,
                             summarize)
from actors.episodes.trajectory import STOP
from actors.episodes.trajectory import Trajectory


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 1, 4) == pytest.approx(1.0)
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - comb(3, 3) / comb(5, 3))
    assert pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)  # pass@1 is the mean of resolved
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)
    # Averaged over tasks; a task with fewer scored attempts than k is left out of pass@k.
    assert mean_pass_at_k([(4, 1), (4, 3)], 1) == pytest.approx((0.25 + 0.75) / 2)
    assert mean_pass_at_k([(4, 1), (1, 1)], 2) == pytest.approx(0.5)
    assert mean_pass_at_k([(1, 0)], 2) is None


@dataclass(frozen=True)
class FakeTask:
    id: str
    stratum: str
    family: str = ""
    repo: str = "repo-a"


def _tasks():
    return ([FakeTask(f"a-{i:02d}", "easy") for i in range(60)] + [FakeTask(f"b-{i:02d}", "medium") for i in range(30)]
            + [FakeTask(f"c-{i:02d}", "hard") for i in range(10)])


def test_stratified_subset_is_deterministic_and_proportional():
    tasks = _tasks()
    first = stratified_subset(tasks, 20, seed=3)
    assert first == stratified_subset(list(reversed(tasks)), 20, seed=3)  # input order does not matter
    assert [t.id for t in first] == sorted(t.id for t in first)
    counts = {s: sum(t.stratum == s for t in first) for s in ("easy", "medium", "hard")}
    assert counts == {"easy": 12, "medium": 6, "hard": 2}
    assert stratified_subset(tasks, 20, seed=4) != first  # the seed picks which ones
    odd = stratified_subset(tasks, 7, seed=0)  # 4.2 / 2.1 / 0.7 -> largest remainder
    assert len(odd) == 7 and {s: sum(t.stratum == s for t in odd) for s in ("easy", "medium", "hard")} == \
        {"easy": 4, "medium": 2, "hard": 1}
    assert stratified_subset(tasks, 0, seed=0) == sorted(tasks, key=lambda t: t.id)
    assert len(stratified_subset(tasks, 500, seed=0)) == 100


def _traj(task_id, member, outcome, attempt=0, patch=""):
    return Trajectory(0, member, attempt, task_id, 0, outcome=outcome, model_patch=patch)


def test_queue_reruns_infra_errors_and_summary_never_scores_them():
    tasks = [FakeTask("t1", "easy", family="compare"), FakeTask("t2", "hard")]
    queue = EvalQueue(tasks, attempts=2, max_infra_retries=1, seed=0)
    items = [queue.acquire("w") for _ in range(4)]
    assert queue.acquire("w") is None  # all handed out, none finished
    outcomes = {("t1", 0): "resolved", ("t1", 1): "infra_error", ("t2", 0): "unresolved", ("t2", 1): "infra_error"}
    for item in items:
        traj = _traj(item.task_id, item.member, outcomes[(item.task_id, item.member)], patch=f"p-{item.task_id}")
        traj.group_id = item.group_id
        queue.submit(traj)
    retries = [queue.acquire("w"), queue.acquire("w")]
    assert all(r.attempt == 1 for r in retries) and queue.acquire("w") is None
    for r in retries:  # t1's retry resolves; t2's fails again and is out of retries
        outcome = "resolved" if r.task_id == "t1" else "infra_error"
        traj = _traj(r.task_id, r.member, outcome, attempt=1)
        traj.group_id = r.group_id
        queue.submit(traj)
    assert queue.acquire("w") == STOP
    report = summarize(tasks, queue.results(), attempts=2)
    assert report["outcome_mix"] == {"resolved": 2, "unresolved": 1, "truncated": 0, "format_error": 0,
                                     "infra_error": 1}
    assert report["pass@1"] == pytest.approx((1.0 + 0.0) / 2)
    assert report["pass@k"]["2"] == pytest.approx(1.0)  # only t1 has 2 scored attempts
    assert report["tasks_scored_for_k"] == {"1": 2, "2": 1}
    assert report["per_stratum"]["hard"]["scored_attempts"] == 1
    # By family; a task whose source names none is grouped by its repository.
    assert report["per_family"]["compare"] == {"tasks": 1, "scored_attempts": 2, "resolved_attempts": 2,
                                               "pass@1": 1.0, "pass@2": 1.0}
    assert report["per_family"]["repo-a"]["pass@1"] == 0.0 and report["per_family"]["repo-a"]["pass@2"] is None
    rows = predictions(tasks, queue.results(), "m")
    assert rows[0] == {"instance_id": "t1", "model_name_or_path": "m", "model_patch": "p-t1"}


def test_a_dead_eval_episode_actors_attempts_are_rerun_not_lost():
    tasks = [FakeTask("t1", "easy"), FakeTask("t2", "hard")]
    queue = EvalQueue(tasks, attempts=1, max_infra_retries=1, seed=0)
    held = queue.acquire("episode-0")
    other = queue.acquire("episode-1")
    assert queue.abandon("episode-0", "env", "actor died") == 1
    assert queue.abandon("episode-0", "env", "again") == 0  # nothing twice
    rerun = queue.acquire("episode-2")
    assert (rerun.task_id, rerun.attempt) == (held.task_id, 1) and queue.progress()["infra_reruns"] == 1
    for item, outcome in ((other, "resolved"), (rerun, "unresolved")):
        traj = _traj(item.task_id, item.member, outcome, attempt=item.attempt)
        traj.group_id = item.group_id
        queue.submit(traj)
    assert queue.acquire("episode-1") == STOP
    assert sorted(t.outcome for t in queue.results()) == ["resolved", "unresolved"]


@pytest.mark.slow
def test_swe_env_reports_the_workspace_diff_as_model_patch(tmp_path):
    import gymnasium

    import envs  # noqa: F401
    from envs.tasks.loaders import load_tasks

    task = next(t for t in load_tasks("builtin", "eval") if t.gold_patch)
    env = gymnasium.make("swerve/SWE-v0")
    env.reset(options={"task": task})
    sandbox = env.unwrapped._sandbox
    applied = sandbox.exec(f"patch -p1 <<'SWERVE_EOF'\n{task.gold_patch}\nSWERVE_EOF")
    assert applied.exit_code == 0, applied.output
    sandbox.exec("printf 'x\\n' > NEW_FILE.txt && mkdir -p .pytest_cache && echo junk > .pytest_cache/a")
    _, reward, terminated, _, info = env.step("```bash\nsubmit\n```")
    env.close()
    assert terminated and reward == 1.0
    patch = info["model_patch"]
    assert "+++ b/NEW_FILE.txt" in patch and ".pytest_cache" not in patch and info["tampered"] == {}
    # The captured patch applies to a pristine copy and gives the gold result.
    subprocess.run(["cp", "-r", f"{task.workspace_dir}/.", str(tmp_path)], check=True)
    run = subprocess.run(["patch", "-p1", "--dry-run"], input=patch, text=True, cwd=tmp_path, capture_output=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_swerve_eval_end_to_end(ray_session, swerve_cache, tmp_path, capsys):
    from actors.cli.main import main

    rc = main(["eval", f"model.cache_dir={swerve_cache}", f"tokenizer.cache_dir={swerve_cache}",
               f"eval.out_dir={tmp_path}", "eval.num_tasks=2", "eval.attempts=2", "eval.split=eval",
               "engine.num_engines=1", "rollout.num_episode_actors=2", "rollout.max_turns=2",
               "rollout.max_tokens_per_turn=24", "rollout.max_total_tokens=1024", "run.name=evaltest"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "pass@1" in out and "stratum" in out
    report = json.loads((tmp_path / "eval.json").read_text())
    for key in ("pass@1", "pass@k", "per_stratum", "outcome_mix", "num_tasks", "attempts", "per_task"):
        assert key in report
    assert report["num_tasks"] == 2 and set(report["pass@k"]) == {"1", "2"}
    assert sum(report["outcome_mix"].values()) == 4
    assert set(report["outcome_mix"]) == {"resolved", "unresolved", "truncated", "format_error", "infra_error"}
    assert 0.0 <= report["pass@1"] <= 1.0
    rows = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    assert all(set(r) == {"instance_id", "model_name_or_path", "model_patch"} for r in rows)
    assert {r["instance_id"] for r in rows} == {t["task_id"] for t in report["per_task"]}
    attempts = [json.loads(line) for line in (tmp_path / "attempts.jsonl").read_text().splitlines()]
    assert sorted(a["outcome"] for a in attempts) == sorted(o for t in report["per_task"] for o in t["outcomes"])
    assert all(a["messages"][0]["role"] == "system" and a["turns"] >= 1 for a in attempts)


def test_attempt_records_hold_every_attempt_with_its_transcript_in_order():
    late = Trajectory(0, 1, 0, "b", 0, "resolved", turns=2, messages=[{"role": "user", "content": "x"}],
                      model_patch="diff")
    early = Trajectory(1, 0, 1, "a", 0, "infra_error", infra_source="sandbox", error="lost")
    records = attempt_records([late, early])
    assert [(r["task_id"], r["attempt"]) for r in records] == [("a", 1), ("b", 0)]
    assert records[0]["infra_source"] == "sandbox" and records[0]["error"] == "lost"
    assert records[1]["messages"] == [{"role": "user", "content": "x"}] and records[1]["model_patch"] == "diff"
