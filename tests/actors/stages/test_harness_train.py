"""A harness recipe through `make harness-recipe` on a real local Ray, the harness unmodified in every
sandbox; every stage runs; the trainer steps on what the gateway served; the
accounting identity holds. And the expert's traces through the harness."""
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from actors.stages.harness_traces import harness_reply, planned_commands, write_harness_traces
from actors.stages.policy_setup import ensure_policy
from actors.training.sample_collector import COUNTERS
from configs import load_config
from envs.harness_agents import tool_agent
from envs.tasks.expert_plan import has_wrong_edit
from envs.tasks.loaders import load_tasks
from policies.chat.chat_tokenizer import load_chat_tokenizer
from policies.tokenizer import load_tokenizer
from policies.training.sft import render_example

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
# The recipe at its smallest: every stage runs (base eval, traces, SFT, one RL update, SFT and RL evals).
SMALL = ["trainer.total_steps=1", "rollout.group_size=2", "rollout.groups_per_batch=1", "engine.num_engines=1",
         "rollout.num_episode_actors=2", "env.harness.max_requests=2", "rollout.max_tokens_per_turn=24",
         "pipeline.base_eval_tasks=2", "pipeline.trace_tasks=2", "sft.max_steps=2", "sft.batch_size=2",
         "eval.num_tasks=2", "eval.attempts=1", "ray.dashboard=false"]


def test_make_harness_recipe_runs_every_stage_and_keeps_the_books(swerve_cache, tmp_path):
    """`make harness-recipe` as README advertises it, at its smallest: the stages run, the trainer steps
    on what the gateway served, the books balance. tool-agent here (the recipe does not depend on the
    harness, and it imports nothing per episode); mini-swe-agent's episodes are tested in tests/envs."""
    venv = Path(sys.executable).parent.parent  # the suite's own: its set-up stamp is there
    args = " ".join([*SMALL, f"run.dir={tmp_path}", "run.name=harness", f"model.cache_dir={swerve_cache}",
                     f"tokenizer.cache_dir={swerve_cache}"])
    done = subprocess.run(["make", "--no-print-directory", "harness-recipe", f"VENV={venv}", f"ARGS={args}",
                           "HARNESS_CONFIG=configs/harness_tool_agent.yaml",
                           f"TEST_REPORT={tmp_path / 'make'}", f"SETUP_TIMES={tmp_path / 'make' / 'steps.txt'}"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    root = tmp_path / "harness"
    summary = json.loads((root / "summary.json").read_text())
    assert {"base_pass_at_1", "sft_pass_at_1", "rl_pass_at_1"} <= set(summary) and summary["eval_tasks"] == 2
    assert summary["sft_pass_at_1"] is not None and summary["rl_minus_sft"]["tasks"] == 2
    (accounting_file,) = root.glob("**/accounting.json")
    accounting = json.loads(accounting_file.read_text())
    assert accounting["identity_holds"] is True and accounting["trained"] >= 2
    assert accounting["admitted"] == sum(accounting[k] for k in COUNTERS[1:])
    rows = [json.loads(line) for line in (accounting_file.parent / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in rows] == [1]
    trajectories = [json.loads(line) for f in sorted((accounting_file.parent / "trajectories").glob("*.jsonl"))
                    for line in f.read_text().splitlines()]
    scored = [t for t in trajectories if t["outcome"] != "infra_error"]
    assert scored and all(t["messages"][0]["content"] == tool_agent.SYSTEM_PROMPT for t in scored)
    assert all(t["harness"]["requests"] >= 1 for t in scored)


def test_expert_traces_through_the_harness_resolve_in_its_own_format(swerve_cache, tmp_path):
    cfg = load_config("configs/harness_mini_swe_agent.yaml", [f"model.cache_dir={swerve_cache}",
                                                              f"tokenizer.cache_dir={swerve_cache}",
                                                              "pipeline.recovery_rate=0"])
    tokenizer_path, _ = ensure_policy(cfg)
    tasks = load_tasks("micro", "train")[:2]
    counts = write_harness_traces(str(tmp_path / "traces.jsonl"), tasks, cfg, tokenizer_path, workers=1)
    assert counts == {"tasks": 2, "resolved": 2, "rows": 2, "segments_split": 0, "with_recovery": 0}
    rows = [json.loads(line) for line in (tmp_path / "traces.jsonl").read_text().splitlines()]
    tokenizer = load_chat_tokenizer(tokenizer_path)
    text = tokenizer.decode(rows[0]["token_ids"])
    plan = planned_commands(tasks[0], random.Random(f"{cfg.run.seed}/{tasks[0].id}"))
    replies = [harness_reply(command, "default") for command in plan]
    assert all(reply in text for reply in replies)  # every expert reply, as mini-swe-agent's tool call
    generated = tokenizer.decode([t for t, m in zip(rows[0]["token_ids"], rows[0]["loss_mask"]) if m])
    assert generated.count("<tool_call>") == len(replies) and "tool_response" not in generated
    # Each row is a message trace too: its tool calls and their results' call ids kept, rendering
    # back into the very ids the harness's session held.
    calls = [call for m in rows[0]["messages"] if m["role"] == "assistant" for call in m["tool_calls"]]
    assert [json.loads(call["function"]["arguments"])["command"] for call in calls] == plan
    results = [m for m in rows[0]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == [call["id"] for call in calls][:len(results)]
    example = render_example(load_tokenizer(tokenizer_path), rows[0]["messages"], rows[0]["tools"])
    assert (example.token_ids, example.loss_mask[1:]) == (rows[0]["token_ids"], rows[0]["loss_mask"][1:])


def test_a_share_of_harness_traces_recover_from_a_wrong_edit(swerve_cache, tmp_path):
    """pipeline.recovery_rate of the traces (tool-agent's here) edit wrongly, see the tests fail, look
    again and fix the line: the policy learns what to do after a failed edit."""
    cfg = load_config("configs/harness_tool_agent.yaml", [f"model.cache_dir={swerve_cache}",
                                                          f"tokenizer.cache_dir={swerve_cache}",
                                                          "pipeline.recovery_rate=1.0"])
    tokenizer_path, _ = ensure_policy(cfg)
    task = next(t for t in load_tasks("micro", "train") if has_wrong_edit(t))
    counts = write_harness_traces(str(tmp_path / "traces.jsonl"), [task], cfg, tokenizer_path, workers=1)
    assert counts["resolved"] == 1 and counts["with_recovery"] == 1
    (row,) = [json.loads(line) for line in (tmp_path / "traces.jsonl").read_text().splitlines()]
    outputs = [m["content"] for m in row["messages"] if m["role"] == "tool"]
    commands = [json.loads(call["function"]["arguments"]).get("command", "") for m in row["messages"]
                if m["role"] == "assistant" for call in m["tool_calls"]]
    assert sum(command.startswith("sed -i") for command in commands) == 2  # the wrong edit, then the fix
    assert any(out.startswith("exit 1") for out in outputs) and outputs[-1].startswith("exit 0")
