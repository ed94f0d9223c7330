import json
import re

import pytest

from configs.schema import EnvConfig, PipelineConfig, SandboxConfig
from envs.actions import COMMAND, SUBMIT, parse_action
from envs.expert import main, write_traces
from envs.tasks.expert_plan import parse_gold_patch, sed_fix_command
from envs.tasks.loaders import load_tasks
from policies.training.sft import read_traces

TASK_IDS = ["datekit-006", "textkit-003", "vecmath-008"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("expert")
    out = tmp / "traces.jsonl"
    tasks = load_tasks("builtin", "train", TASK_IDS)
    counts = write_traces(str(out), tasks, PipelineConfig(traces_per_task=2, recovery_rate=0.5, trace_workers=1),
                          EnvConfig(), SandboxConfig(workdir_root=str(tmp)), seed=0)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return counts, rows, str(out)


def test_parse_gold_patch_finds_the_buggy_line():
    task = load_tasks("builtin", "train", ["textkit-003"])[0]
    fix = parse_gold_patch(task.gold_patch)
    lines = open(f"{task.workspace_dir}/{fix.path}").read().splitlines()
    assert lines[fix.line_no - 1] == fix.buggy
    assert fix.buggy.strip() == "if len(text) < width:"
    assert fix.fixed.strip() == "if len(text) <= width:"


def test_sed_command_escapes_regex_characters():
    command = sed_fix_command("textkit/count.py", 26, "    return ranked[:n - 1]]", "    return ranked[:n]]")
    assert command == "sed -i '26s/n - 1\\]/n]/' textkit/count.py"


@pytest.mark.slow
def test_every_trace_resolves_and_parses(traces):
    counts, rows, _ = traces
    assert counts["tasks"] == 3
    assert counts["traces"] == counts["resolved"] == len(rows) == 6
    assert {row["task_id"] for row in rows} == set(TASK_IDS)
    for row in rows:
        assert row["resolved"] is True
        messages = row["messages"]
        assert [m["role"] for m in messages[:2]] == ["system", "user"]
        assistant = [m["content"] for m in messages if m["role"] == "assistant"]
        kinds = [parse_action(reply).kind for reply in assistant]
        assert all(kind == COMMAND for kind in kinds[:-1]) and kinds[-1] == SUBMIT
        assert any(re.search(r"sed -i '\d+s/", reply) for reply in assistant)
        # Roles alternate assistant / user (observation) after the problem statement; the trace
        # ends with `submit`, as a rollout's context does (the grader's report is not in it).
        assert [m["role"] for m in messages[2:]] == ["assistant", "user"] * (len(assistant) - 1) + ["assistant"]


@pytest.mark.slow
def test_some_traces_recover_from_a_failing_test(traces):
    counts, rows, _ = traces
    assert counts["with_recovery"] >= 1
    recovered = [row for row in rows if row["recovery"]]
    assert len(recovered) == counts["with_recovery"]
    for row in recovered:
        observations = [m["content"] for m in row["messages"][3::2]]
        test_runs = [obs for obs, reply in zip(observations, row["messages"][2::2])
                     if "pytest" in reply["content"]]
        failing = [i for i, obs in enumerate(test_runs) if not obs.startswith("exit code: 0")]
        passing = [i for i, obs in enumerate(test_runs) if obs.startswith("exit code: 0")]
        assert failing and passing and max(passing) > min(failing)
        edits = [m["content"] for m in row["messages"][2::2] if "sed -i" in m["content"]]
        assert len(edits) == 2


@pytest.mark.slow
def test_file_loads_with_read_traces(traces):
    _, rows, path = traces
    loaded, skipped = read_traces(path, filter_resolved=True)
    assert skipped == 0 and len(loaded) == len(rows)


@pytest.mark.slow
def test_main_writes_traces(tmp_path, capsys):
    out = tmp_path / "one.jsonl"
    assert main(["--out", str(out), "-n", "1", "--ids", "textkit-003", "--no-think"]) == 0
    counts = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert counts["traces"] == 1
    row = json.loads(out.read_text())
    assert row["messages"][2]["content"].startswith("```bash\n")


@pytest.mark.slow
def test_parallel_workers_play_the_same_traces(traces, tmp_path):
    """Each task draws from its own seeded RNG, so two processes write what one does, byte for
    byte: the expert's test command prints no timings (an SFT stage is reproducible)."""
    _, rows, _ = traces
    out = tmp_path / "parallel.jsonl"
    told = []  # what a progress line hears: (tasks done, traces resolved so far), one per task
    counts = write_traces(str(out), load_tasks("builtin", "train", TASK_IDS),
                          PipelineConfig(traces_per_task=2, recovery_rate=0.5, trace_workers=2),
                          EnvConfig(), SandboxConfig(workdir_root=str(tmp_path)), seed=0,
                          on_task=lambda *done: told.append(done))
    parallel = [json.loads(line) for line in out.read_text().splitlines()]
    assert counts["traces"] == len(rows)
    assert [done for done, _ in told] == list(range(1, len(TASK_IDS) + 1))
    assert told[-1][1] == counts["resolved"] and all(a[1] <= b[1] for a, b in zip(told, told[1:]))

    def replies(rs):
        return [(r["task_id"], r["recovery"], [m["content"] for m in r["messages"] if m["role"] == "assistant"])
                for r in rs]
    assert replies(parallel) == replies(rows)
    assert out.read_text() == open(traces[2]).read()
