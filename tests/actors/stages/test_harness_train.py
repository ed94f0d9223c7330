"""configs/harness_mini_swe_agent.yaml on a real local Ray: mini-swe-agent, unmodified, in every
sandbox; the trainer steps on what the gateway served; the accounting identity holds."""
import json
import random

import pytest

from actors.stages.driver import train
from actors.stages.harness_traces import harness_reply, planned_commands, write_harness_traces
from actors.stages.policy_setup import ensure_policy
from actors.training.sample_collector import COUNTERS
from configs import load_config
from envs.tasks.loaders import load_tasks
from policies.chat.chat_tokenizer import load_chat_tokenizer
from policies.tokenizer import load_tokenizer
from policies.training.sft import render_example

pytestmark = pytest.mark.slow

SMALL = ["trainer.total_steps=1", "rollout.group_size=2", "rollout.groups_per_batch=1", "engine.num_engines=1",
         "rollout.num_episode_actors=2", "env.harness.max_requests=2", "rollout.max_tokens_per_turn=24"]


def test_the_recipe_trains_mini_swe_agent_and_keeps_the_books(ray_session, swerve_cache, tmp_path):
    cfg = load_config("configs/harness_mini_swe_agent.yaml", [*SMALL, f"run.dir={tmp_path}", "run.name=harness",
                                                              f"model.cache_dir={swerve_cache}",
                                                              f"tokenizer.cache_dir={swerve_cache}"])
    path = train(cfg)
    accounting = json.loads((path / "accounting.json").read_text())
    assert accounting["identity_holds"] is True and accounting["trained"] >= 2
    assert accounting["admitted"] == sum(accounting[k] for k in COUNTERS[1:])
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in rows] == [1]
    trajectories = [json.loads(line) for f in sorted((path / "trajectories").glob("*.jsonl"))
                    for line in f.read_text().splitlines()]
    scored = [t for t in trajectories if t["outcome"] != "infra_error"]
    assert scored and all(t["messages"][0]["content"].startswith("You are a helpful assistant") for t in scored)
    assert all(t["harness"]["requests"] >= 1 for t in scored)


def test_expert_traces_through_the_harness_resolve_in_its_own_format(swerve_cache, tmp_path):
    cfg = load_config("configs/harness_mini_swe_agent.yaml", [f"model.cache_dir={swerve_cache}",
                                                              f"tokenizer.cache_dir={swerve_cache}"])
    tokenizer_path, _ = ensure_policy(cfg)
    tasks = load_tasks("micro", "train")[:2]
    counts = write_harness_traces(str(tmp_path / "traces.jsonl"), tasks, cfg, tokenizer_path, workers=1)
    assert counts == {"tasks": 2, "resolved": 2, "rows": 2, "segments_split": 0}
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
