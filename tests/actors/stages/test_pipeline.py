"""`swerve pipeline` end to end at the smallest size: every stage runs and the files appear; a
re-run continues (finished stages skipped, RL resumed from its checkpoint) instead of starting over."""
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from actors.cli.main import main
from bench.browser import browser_path
from actors.training.sample_collector import COUNTERS
from actors.stages.stage_cache import MARKER
from configs import load_config

REPO = Path(__file__).resolve().parents[3]
IDENTITY = COUNTERS[1:]  # everything admitted is in exactly one of these
SMALL = ["pipeline.trace_tasks=2", "pipeline.traces_per_task=1", "sft.max_steps=2", "sft.batch_size=2",
         "trainer.total_steps=1", "engine.num_engines=1", "eval.num_tasks=2", "eval.attempts=1",
         "rollout.max_turns=2", "rollout.max_tokens_per_turn=16", "rollout.group_size=2",
         "rollout.groups_per_batch=1", "rollout.num_episode_actors=2"]


def story_args(run_dir, swerve_cache, name="story", *extra):
    return [f"run.dir={run_dir}", f"run.name={name}", f"model.cache_dir={swerve_cache}",
            f"tokenizer.cache_dir={swerve_cache}", *SMALL, *extra]


# The story's shape is make run's (configs/default.yaml): micro tasks, RL on the fresh-task stream
# with pass-rate selection, an eval along the way (after step 1, so RL runs as two segments).
STORY = ["tasks.source=micro", "pipeline.rl_tasks=stream", "rollout.task_selection=pass_rate",
         "trainer.total_steps=2", "pipeline.rl_eval_steps=[1]"]


@pytest.fixture(scope="module")
def story(ray_session, swerve_cache, tmp_path_factory):
    """One finished pipeline (base, sft, rl) shared by the tests that read it or re-run it."""
    run_dir = tmp_path_factory.mktemp("pipeline")
    terminal = io.StringIO()  # what a user would see (a pipe, not a terminal: no live redraws)
    # A status line every 0.2 s, so even a fast machine's 2-task eval writes one to the log.
    with contextlib.redirect_stdout(terminal), pytest.MonkeyPatch.context() as patch:
        patch.setenv("SWERVE_CACHE_DIR", str(run_dir / "tasks"))  # the stream's rows, this run's own
        assert main(["pipeline", *story_args(run_dir, swerve_cache, "story", "run.status_interval_s=0.2",
                                             *STORY)]) == 0
    (run_dir / "terminal.txt").write_text(terminal.getvalue())
    return run_dir


@pytest.mark.slow  # reads the pipeline's output
def test_the_console_shows_a_progress_line_per_stage_and_the_log_holds_the_rest(story):
    console = (story / "terminal.txt").read_text().splitlines()
    log = (story / "story" / "logs" / "console.log").read_text()
    assert len(console) < 40, console
    for label, unit, times in (("base eval", "attempts", 1), ("sft traces", "tasks", 1), ("sft train", "steps", 1),
                               ("rl train", "steps", 2), ("sft eval", "attempts", 1), ("rl eval", "attempts", 2)):
        done = [line for line in console if line.startswith(f"[swerve] {label}: ") and "took" in line]
        assert len(done) == times and all(f" {unit}/" in line for line in done), (label, console)  # rl: 2 segments, 2 evals
    assert console[-2] == f"[swerve] the whole log: {story / 'story' / 'logs' / 'console.log'}"
    assert console[-1].startswith(f"[swerve] what the agent did: {story / 'story' / 'view.html'} (opens offline")
    # Each step's status, the weight-loading bars and Ray's worker notices are the log's alone.
    for chatter in ("[swerve] step 1/1", "Loading weights", "[swerve] eval: "):
        assert chatter in log and not any(chatter in line for line in console), chatter
    assert all(line in log for line in console[:-2])  # the log holds the console's lines too


@pytest.mark.slow  # reads the pipeline's output, in a real browser
def test_the_run_s_page_shows_its_steps_trajectories_groups_and_eval_in_a_real_browser(story, tokenizer_path, tmp_path):
    """A user's clicks through the page the pipeline wrote (tests/actors/report/view/browse.py), checked
    against the run's files; the screenshots stay in runs/check-view/."""
    from policies.tokenizer import load_tokenizer
    from tests.actors.report.view import browse
    from tests.actors.report.view.run_fixture import HOSTILE, write_run

    if browser_path() is None:
        pytest.skip("no headless browser: `make chromium` installs Debian's chromium (make test does)")
    root = story / "story"
    seen = browse.walk(root / "view.html", REPO / "runs" / "check-view")
    step_files = sorted((root / "rl" / "trajectories").glob("step_*.jsonl"))
    assert seen["steps"] == [f"step-rl-{int(f.stem.split('_')[1])}" for f in step_files] and seen["step"] == "step-rl-1"
    rows = [json.loads(line) for line in step_files[0].read_text().splitlines()]
    assert seen["bars"] == list(range(len(rows))) and seen["trajectory"] == "#/traj/step-rl-1/0"
    shown = rows[0]
    assert seen["title"] == f"{shown['task_id']} · g{shown['group_id']}·m{shown['member']}"
    assert seen["diff"].strip() == (shown["model_patch"].strip() or "no change")
    tokens = shown["tokens"]
    assert len(seen["tokens"]) == len(tokens["ids"]) == shown["generated_tokens"]
    assert [version for _, version, _ in seen["tokens"]] == [v for v, n in tokens["versions"] for _ in range(n)]
    assert [trained for _, _, trained in seen["tokens"]] == [m for m, n in tokens["trained"] for _ in range(n)]
    tok, at, replies = load_tokenizer(str(root / "rl" / "policy")), 0, []
    for length in tokens["replies"]:
        replies.append(tok.decode(tokens["ids"][at:at + length]))
        at += length
    assert "".join(text for text, _, _ in seen["tokens"]) == "".join(replies)
    assert len(seen["members"]) == sum(row["group_id"] == shown["group_id"] for row in rows)
    report = json.loads((root / "rl" / "eval.json").read_text())
    assert seen["tasks"] == sorted(row["task_id"] for row in report["per_task"])
    assert seen["task"] == seen["tasks"][0] and seen["columns"] == ["base", "sft", "rl"]
    # A policy's markup in a message is shown as text, and none of it runs.
    hostile_root = write_run(tmp_path / "hostile", tokenizer_path)
    assert main(["view", str(hostile_root)]) == 0
    hostile = browse.hostile(hostile_root / "view.html")
    assert hostile["title"] == "swerve: hostile" and hostile["images"] == 0 and HOSTILE in hostile["shown"]


@pytest.mark.slow  # the whole pipeline on Ray
def test_pipeline_writes_summary_predictions_and_curve(story):
    root = story / "story"
    summary = json.loads((root / "summary.json").read_text())
    assert {"base_pass_at_1", "sft_pass_at_1", "rl_pass_at_1", "attempts_per_task", "eval_tasks"} <= set(summary)
    assert summary["eval_tasks"] == 2 and summary["attempts_per_task"] == 1
    for delta in ("sft_minus_base", "rl_minus_sft"):
        assert {"delta", "ci95_low", "ci95_high", "tasks", "better", "worse"} <= set(summary[delta])
        assert summary[delta]["ci95_low"] <= summary[delta]["delta"] <= summary[delta]["ci95_high"]
    assert set(summary["pass_at_1_ci95"]) == {"base", "sft", "rl"}
    from envs.tasks.loaders import load_tasks

    train_ids = [t.id for t in load_tasks("micro", "train", [])]
    for stage in ("base", "sft", "rl"):
        assert (root / stage / "eval.json").is_file()
        marker = json.loads((root / stage / MARKER).read_text())
        assert marker["stage"] == stage and marker["outputs"]["eval"] == f"{stage}/eval.json"
        assert marker["pass@1"] == summary[f"{stage}_pass_at_1"]
    sft_marker = json.loads((root / "sft" / MARKER).read_text())
    assert sft_marker["outputs"]["policy"] == "sft/policy" and sft_marker["traced_task_ids"] == train_ids[:2]
    assert (root / "rl" / "policy" / "config.json").is_file()
    # RL started from SFT's policy, the output of the stage before it.
    rl_config = yaml.safe_load((root / "rl" / "config.yaml").read_text())
    assert rl_config["model"]["path"].endswith("sft/policy")
    rows = [json.loads(line) for line in (root / "predictions.jsonl").read_text().splitlines()]
    assert rows and all({"instance_id", "model_name_or_path", "model_patch"} <= set(r) for r in rows)
    assert (root / "learning_curve.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow  # re-runs the finished pipeline on Ray
def test_rerun_of_a_finished_pipeline_skips_every_stage(story, swerve_cache, capsys):
    root = story / "story"
    capsys.readouterr()
    before = {path: (path.read_bytes(), path.stat().st_mtime_ns)
              for stage in ("base", "sft", "rl") for path in (root / stage / "eval.json", root / stage / MARKER)}
    summary = (root / "summary.json").read_bytes()
    assert main(["pipeline", *story_args(story, swerve_cache, "story", *STORY)]) == 0
    out = capsys.readouterr().out
    for stage in ("base", "sft", "rl"):
        line = next(line for line in out.splitlines() if line.startswith(f"[swerve] pipeline: {stage} "))
        assert "skipped" in line and "pipeline.fresh=true" in line, line
    assert "expert traces" not in out and "RL on" not in out  # nothing ran again
    assert {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in before} == before
    assert (root / "summary.json").read_bytes() == summary  # the same summary from the reports read back
    assert "rl - sft:" in out  # the table is printed as after a full run


def _tails(console: Path, root: Path) -> str:
    """A child pipeline's console and the end of its run's log, for a failed assert."""
    run_log = root / "logs" / "console.log"
    return console.read_text()[-2000:] + "\n--- run log ---\n" + (run_log.read_text()[-3000:] if run_log.exists() else "")


# Ray's per-node agents outlive a SIGKILLed raylet for minutes; they write nothing of a run's.
RAY_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")


def _group(pgid: int) -> dict[int, str]:
    """pid -> command line of the live processes in a process group."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (FileNotFoundError, ProcessLookupError):
                continue  # it exited while we looked
            if int(fields[2]) == pgid and fields[0] != "Z":
                found[int(entry.name)] = command
    return found


# make check (docs/contracts.md): a kill and a resume are test_ray_job's in make test, and the pipeline's
# RL resuming from its checkpoint is the story's second segment.
@pytest.mark.check  # a pipeline in a child process (its own Ray), SIGKILLed during RL and re-run
def test_pipeline_killed_during_rl_resumes_from_its_checkpoint(ray_session, swerve_cache, tmp_path, capsys):
    from policies.training.checkpoint import latest_checkpoint, list_checkpoints

    # RL alone (skipping finished stages is the test above's), two steps, a checkpoint after each.
    args = story_args(tmp_path, swerve_cache, "killed", "pipeline.stages=[rl]", "trainer.total_steps=2",
                      "trainer.checkpoint_interval=1")
    root = tmp_path / "killed"
    log = tmp_path / "killed.log"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a local Ray of its own
    with log.open("w") as out:
        # Its own session: the pipeline and the Ray it starts are one process group we can wait on.
        proc = subprocess.Popen([sys.executable, "-m", "actors", "pipeline", *args], cwd=REPO, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 150
        while latest_checkpoint(str(root / "rl" / "checkpoints")) is None:
            assert proc.poll() is None, f"the pipeline ended (rc {proc.returncode}) before a checkpoint:\n" \
                                        + _tails(log, root)
            assert time.monotonic() < deadline, "no RL checkpoint within 150 s:\n" + _tails(log, root)
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)  # the pipeline's process, as a user's kill -9 would
        proc.wait()
        # Its Ray and actors die with it; wait so that nothing of the killed run still writes into the run dir.
        deadline = time.monotonic() + 60
        while [c for c in _group(proc.pid).values() if not c.startswith(RAY_AGENTS)]:
            assert time.monotonic() < deadline, f"the killed run's processes still run: {_group(proc.pid)}"
            time.sleep(0.5)
    finally:
        for pid in _group(proc.pid):  # Ray's agents, or what a failed assert left: ours to end
            with contextlib.suppress(ProcessLookupError):  # it may end on its own meanwhile
                os.kill(pid, signal.SIGKILL)
    assert not (root / "rl" / MARKER).exists()
    saved_step = list_checkpoints(str(root / "rl" / "checkpoints"))[-1][0]
    assert saved_step == 1, _tails(log, root)

    capsys.readouterr()
    assert main(["pipeline", *args]) == 0
    out = capsys.readouterr().out
    assert "[swerve] pipeline: rl resumes from its newest checkpoint (rl/checkpoints/" in out
    assert re.search(rf"\[swerve\] resumed at step {saved_step}\b", out), out[-3000:]
    rows = [json.loads(line) for line in (root / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]  # the step before the kill kept, the one after it done once
    assert [r["policy_version"] for r in rows] == [1, 2]
    accounting = json.loads((root / "rl" / "accounting.json").read_text())
    assert accounting["admitted"] == sum(accounting[k] for k in IDENTITY)
    trained = [(t["group_id"], t["member"], t["attempt"]) for f in (root / "rl" / "trajectories").glob("*.jsonl")
               for t in map(json.loads, f.read_text().splitlines())]
    assert trained and len(trained) == len(set(trained))  # nothing trained twice across the kill
    assert (root / "rl" / MARKER).is_file() and (root / "rl" / "policy" / "config.json").is_file()
    summary = json.loads((root / "summary.json").read_text())
    assert summary["stages"] == ["rl"] and summary["rl_pass_at_1"] == json.loads((root / "rl" / MARKER).read_text())["pass@1"]


@pytest.mark.slow  # reads the pipeline's output
def test_the_rl_stage_on_the_stream_is_evaluated_along_the_way_and_resumes_without_repeating_a_task(story):
    root = story / "story"
    rl_config = yaml.safe_load((root / "rl" / "config.yaml").read_text())["tasks"]
    assert (rl_config["split"], rl_config["ids"]) == ("stream", [])
    trained = [json.loads(line) for f in sorted((root / "rl" / "trajectories").glob("*.jsonl"))
               for line in f.read_text().splitlines()]
    assert trained and all(t["task_id"].startswith("micro-stream-") for t in trained)
    groups: dict[str, set] = {}
    for t in trained:  # fresh tasks, each rolled out as one group, none drawn again after the resume
        groups.setdefault(t["task_id"], set()).add(t["group_id"])
    assert all(len(g) == 1 for g in groups.values()), groups
    assert (root / "rl" / "at-step-1" / "eval.json").is_file() and (root / "rl_curve.png").is_file()
    curve = json.loads((root / "summary.json").read_text())["rl_curve"]
    assert [p["step"] for p in curve] == [1, 2] and all("minus_sft" in p for p in curve)
    events = [json.loads(line)["event"] for line in (root / "rl" / "events.jsonl").read_text().splitlines()]
    assert events == ["start", "done", "resume", "done"]  # the second segment went on from the first's end
    acc = json.loads((root / "rl" / "accounting.json").read_text())
    assert acc["admitted"] == sum(acc[k] for k in IDENTITY)
    assert acc["admission"]["tasks_seen"] >= 2 and acc["admission"]["groups_by_pass_rate"] == 0
    rows = [json.loads(line) for line in (root / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in rows] == [1, 2] and all(r["train_pass_rate"] is not None for r in rows)


# -- the stages' configs (no Ray) -------------------------------------------------------------
def _cfg(tmp_path, *extra):
    return load_config(None, [f"run.dir={tmp_path}", "run.name=plan", *extra])


def test_every_stage_pipeline_stages_may_name_has_its_work():
    from actors.stages.pipeline import STAGE_WORK
    from actors.stages.stage_cache import STAGES

    assert tuple(STAGE_WORK) == STAGES


def test_rl_pool_is_the_tasks_sft_never_saw_or_the_stream():
    from actors.stages.pipeline import rl_task_ids

    assert rl_task_ids(["a", "b", "c"], ["a"], "unseen") == ["b", "c"]
    assert rl_task_ids(["a", "b", "c"], ["a"], "all") == ["a", "b", "c"]
    assert rl_task_ids(["a", "b", "c"], ["a"], "stream") == []
    with pytest.raises(ValueError, match="pipeline.trace_tasks"):
        rl_task_ids(["a"], ["a"], "unseen")


def test_traces_come_from_the_first_training_tasks_and_never_from_fewer_than_asked(tmp_path):
    from actors.stages.pipeline import traced_tasks

    tasks = ["a", "b", "c"]
    assert traced_tasks(tasks, _cfg(tmp_path, "pipeline.trace_tasks=2")) == ["a", "b"]
    assert traced_tasks(tasks, _cfg(tmp_path, "pipeline.trace_tasks=0")) == tasks
    with pytest.raises(ValueError, match="pipeline.trace_tasks is 4 .* has 3 tasks: lower pipeline.trace_tasks"):
        traced_tasks(tasks, _cfg(tmp_path, "pipeline.trace_tasks=4"))


def test_the_rl_stage_draws_from_the_stream_and_stops_at_its_eval_points(tmp_path):
    from actors.stages.evaluate import eval_rollout
    from actors.stages.pipeline import base_eval_cfg, rl_cfg, rl_segments

    cfg = _cfg(tmp_path, "tasks.source=micro", "pipeline.rl_tasks=stream", "trainer.total_steps=30",
               "pipeline.rl_eval_steps=[20,10]", "pipeline.base_eval_tasks=20", "pipeline.base_eval_attempts=1",
               "pipeline.base_max_turns=2")
    assert rl_segments(cfg) == [10, 20, 30]
    on_stream = rl_cfg(cfg, "sft/policy", [], 10, resume=False)
    assert (on_stream.tasks.split, on_stream.tasks.ids, on_stream.trainer.total_steps) == ("stream", [], 10)
    on_pool = rl_cfg(cfg, "sft/policy", ["a"], 30, resume=True)
    assert (on_pool.tasks.split, on_pool.tasks.ids, on_pool.run.resume) == ("train", ["a"], True)
    base = base_eval_cfg(cfg)
    assert (base.eval.num_tasks, base.eval.attempts, eval_rollout(base).max_turns) == (20, 1, 2)
    assert (cfg.eval.attempts, eval_rollout(cfg).max_turns) != (1, 2)  # only the base eval is cheaper
    # Training rollouts may stop sooner than the evals, whose turns eval.max_turns sets.
    shorter = _cfg(tmp_path, "rollout.max_turns=6", "eval.max_turns=8", "eval.temperature=0.3")
    assert (eval_rollout(shorter).max_turns, eval_rollout(shorter).temperature) == (8, 0.3)
    assert rl_cfg(shorter, "sft/policy", [], 10, resume=False).rollout.max_turns == 6
    assert eval_rollout(_cfg(tmp_path, "rollout.max_turns=6")).max_turns == 6
    with pytest.raises(ValueError, match="rl_eval_steps"):
        rl_segments(_cfg(tmp_path, "trainer.total_steps=30", "pipeline.rl_eval_steps=[30]"))


def test_summary_table_prints_intervals_and_paired_deltas():
    from actors.report.stage_summary import summary_table

    summary = {"attempts_per_task": 4, "eval_tasks": 100, "stages": ["sft", "rl"],
               "sft_pass_at_1": 0.45, "rl_pass_at_1": 0.57,
               "pass_at_1_ci95": {"sft": [0.35, 0.55], "rl": [0.47, 0.66]},
               "pass_at_k": {"sft": {"4": 0.49}, "rl": {"4": 0.62}},
               "rl_minus_sft": {"delta": 0.12, "ci95_low": 0.06, "ci95_high": 0.18, "tasks": 100, "better": 20,
                                "worse": 4}}
    text = summary_table(summary)
    assert " 45.0% [ 35.0%,  55.0%]" in text and "rl - sft: +12.0 points [+6.0, +18.0]" in text


def test_summary_table_prints_each_family_and_names_the_ones_that_fell():
    from actors.report.stage_summary import summary_table

    delta = {"delta": 0.0, "ci95_low": -0.1, "ci95_high": 0.1, "tasks": 40, "better": 5, "worse": 5}
    summary = {"attempts_per_task": 2, "eval_tasks": 40, "stages": ["sft", "rl"], "sft_pass_at_1": 0.5,
               "rl_pass_at_1": 0.5, "pass_at_1_ci95": {"sft": [0.4, 0.6], "rl": [0.4, 0.6]},
               "pass_at_k": {"sft": {}, "rl": {}}, "rl_minus_sft": delta,
               "rl_minus_sft_by_family": {
                   "compare": {**delta, "delta": 0.225, "ci95_low": 0.025, "ci95_high": 0.45},
                   "off_by_one": {**delta, "delta": -0.125, "ci95_low": -0.25, "ci95_high": -0.025}},
               "pass_at_1_by_family": {"sft": {"compare": 0.7, "off_by_one": 0.2},
                                       "rl": {"compare": 0.925, "off_by_one": 0.075}}}
    text = summary_table(summary)
    assert "compare      |  70.0% |  92.5% |  +22.5 [+2.5, +45.0]" in text
    assert "off_by_one   |  20.0% |   7.5% |  -12.5 [-25.0, -2.5]" in text
    assert text.endswith("whole interval below 0): off_by_one")


def test_a_stage_with_no_scored_task_is_summarized_not_a_crash(tmp_path):
    from actors.report.stage_summary import summarize
    from configs.schema import Config

    def report(resolved_n):
        return {"pass@1": 0.0 if not resolved_n[1] else resolved_n[0] / resolved_n[1], "pass@k": {"4": 0.0},
                "num_tasks": 2, "per_task": [{"task_id": t, "resolved": resolved_n[0], "n": resolved_n[1]}
                                             for t in ("a", "b")]}

    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "predictions.jsonl").write_text("")
    # Every base attempt was an infra error (n=0: never scored); SFT's were scored.
    summary = summarize(Config(), tmp_path, {"base": report((0, 0)), "sft": report((2, 4))})
    assert summary["sft_minus_base"] is None and summary["pass_at_1_ci95"]["base"] is None
    assert summary["pass_at_1_ci95"]["sft"] is not None
    from actors.report.stage_summary import summary_table

    text = summary_table(summary)
    assert "(no task scored)" in text and "sft - base: no task scored in both stages" in text
    assert (tmp_path / "learning_curve.png").exists()


def test_a_page_that_cannot_be_written_is_a_warning_not_the_end_of_the_pipeline(tmp_path, monkeypatch, capsys):
    from actors.report import console
    from actors.stages import pipeline

    def full_disk(root, stages):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pipeline, "write_page", full_disk)
    with console.session(tmp_path / "logs", verbose=True):
        assert pipeline._write_view(tmp_path) is None
    out = capsys.readouterr().out
    assert "view.html) was not written: OSError" in out and f"swerve view {tmp_path}` tries again" in out
