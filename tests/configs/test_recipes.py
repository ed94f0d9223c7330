"""Every shipped config loads and yields a placement plan; the reference recipe has its settings."""
import json
from pathlib import Path

import pytest

from actors.cluster.placement_plan import build_plan, role
from configs import load_config

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


def test_there_are_shipped_configs():
    names = {p.name for p in CONFIGS}
    assert {"default.yaml", "qwen3_30b_a3b_swe.yaml", "eval_swebench_verified_100.yaml"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_config_loads_and_plans(path):
    cfg = load_config(str(path))
    for mode in ("train", "eval"):
        plan = build_plan(cfg, mode)
        assert role(plan, "engine")["count"] == cfg.engine.num_engines
        assert role(plan, "episode")["count"] == role(plan, "sandbox")["count"] == cfg.rollout.num_episode_actors
        names = [n for a in plan["actors"] for n in a["names"]]
        assert len(names) == len(set(names)) == plan["totals"]["actors"]
    assert role(build_plan(cfg), "trainer")["count"] == cfg.trainer.num_shards


def test_reference_recipe():
    cfg = load_config("configs/qwen3_30b_a3b_swe.yaml")
    assert (cfg.engine.backend, cfg.engine.num_engines, cfg.engine.tp_size) == ("sglang", 8, 1)
    assert cfg.engine.max_context_tokens == 65536
    assert cfg.trainer.backend == "megatron" and cfg.trainer.kl_coef == 0.0
    assert (cfg.sandbox.backend, cfg.sandbox.vcpus, cfg.sandbox.memory_mb) == ("e2b", 2, 4096)
    assert cfg.rollout.group_size == 8
    assert (cfg.rollout.max_tokens_per_turn, cfg.rollout.max_total_tokens, cfg.rollout.max_turns) == (8192, 65536, 80)
    assert cfg.model.path == "Qwen/Qwen3-30B-A3B-Instruct-2507"
    plan = build_plan(cfg)
    engines = role(plan, "engine")
    assert engines["count"] == 8 and engines["resources"]["num_gpus"] == 1
    assert engines["resources"]["custom"] == {"engine": 0.001}
    engine_pg = next(g for g in plan["placement_groups"] if g["name"] == "engine-pg")
    assert engine_pg["strategy"] == "SPREAD" and engine_pg["bundles"] == [{"GPU": 1, "engine": 0.001}] * 8
    trainer_pg = next(g for g in plan["placement_groups"] if g["name"] == "trainer-pg")
    assert len(trainer_pg["bundles"]) == cfg.trainer.num_shards
    assert plan["totals"]["num_gpus"] == 8 + cfg.trainer.num_shards
    assert role(plan, "sandbox")["count"] == 384


def test_reference_eval_recipe():
    cfg = load_config("configs/eval_swebench_verified_100.yaml")
    assert (cfg.eval.num_tasks, cfg.eval.attempts, cfg.eval.split) == (100, 4, "all")
    assert cfg.tasks.format == "swebench" and cfg.sandbox.container_workdir == "/testbed"
    plan = build_plan(cfg, "eval")
    assert role(plan, "eval_queue")["count"] == 1 and not any(a["role"] == "trainer" for a in plan["actors"])


def test_default_plan_needs_no_gpu():
    plan = build_plan(load_config("configs/default.yaml"))
    assert plan["totals"]["num_gpus"] == 0 and plan["placement_groups"] == []


@pytest.mark.slow
@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_swerve_plan_prints_every_role_and_no_gpu_twice(path, capsys):
    from actors.cli.main import main

    for mode in ("train", "eval"):
        assert main(["plan", "--config", str(path), "--mode", mode, "--json"]) == 0
        plan = json.loads(capsys.readouterr().out)
        rows = plan["roles"]
        assert len(rows) == plan["totals"]["actors"] and {"role", "name", "node", "gpus"} <= set(rows[0])
        taken = [(r["node"], g) for r in rows for g in r["gpus"]]
        assert len(taken) == len(set(taken)) == plan["totals"]["num_gpus"]
        assert plan["limits"]["deadlines"]["sandbox_margin_s"] > 0
        assert main(["plan", "--config", str(path), "--mode", mode]) == 0
        table = capsys.readouterr().out
        assert all(r["name"] in table for r in rows if r["gpus"]) and "limits in force" in table


def test_reference_plan_puts_8_engines_and_8_trainer_ranks_on_distinct_gpus():
    plan = build_plan(load_config("configs/qwen3_30b_a3b_swe.yaml"))
    for kind in ("engine", "trainer"):
        rows = [r for r in plan["roles"] if r["role"] == kind]
        assert len(rows) == 8 and len({(r["node"], g) for r in rows for g in r["gpus"]}) == 8
        assert all(len(r["gpus"]) == 1 for r in rows)
    trainer_nodes = [r["node"] for r in plan["roles"] if r["role"] == "trainer"]
    assert trainer_nodes == sorted(trainer_nodes)  # ranks packed per node, in rank order


def test_plan_refuses_an_engine_wider_than_a_node():
    cfg = load_config("configs/qwen3_30b_a3b_swe.yaml", ["engine.tp_size=16"])
    with pytest.raises(ValueError, match="ray.gpus_per_node"):
        build_plan(cfg)


def test_engines_spread_over_the_nodes_they_need_and_trainers_pack():
    cfg = load_config("configs/qwen3_30b_a3b_swe.yaml", ["engine.num_engines=4", "engine.tp_size=4",
                                                          "trainer.num_shards=12"])
    rows = build_plan(cfg)["roles"]
    engines = [(r["node"], r["gpus"]) for r in rows if r["role"] == "engine"]
    assert engines == [("engine-node-0", [0, 1, 2, 3]), ("engine-node-1", [0, 1, 2, 3]),
                       ("engine-node-0", [4, 5, 6, 7]), ("engine-node-1", [4, 5, 6, 7])]
    trainers = [r["node"] for r in rows if r["role"] == "trainer"]
    assert trainers == ["trainer-node-0"] * 8 + ["trainer-node-1"] * 4
