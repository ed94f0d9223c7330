"""multiturn_rollout: the prefix cache's benchmark measures both sides on the same rollouts."""
from dataclasses import replace

import pytest

from bench.throughput.multiturn_rollout import CONVERSATIONS, HEADLINE, SHAPES, TURNS, multiturn_rollout


@pytest.mark.slow
def test_both_sides_run_the_same_conversations_and_give_the_same_tokens(tiny_cfg):
    cfg = replace(tiny_cfg, rollout=replace(tiny_cfg.rollout, max_tokens_per_turn=8),
                  engine=replace(tiny_cfg.engine, max_context_tokens=4096))
    result = multiturn_rollout(cfg, 1)
    assert result["token_identical"] is True and set(result["shapes"]) == set(SHAPES)
    for name, shape in result["shapes"].items():
        assert shape["token_identical"] is True and shape["reply_tokens"] == 8  # capped as in a run
        on, off = shape["runs"]["cache_on"][0], shape["runs"]["cache_off"][0]
        assert on["context_tokens_last_turn"] == off["context_tokens_last_turn"] > TURNS * 8
        assert shape["tokens_per_s_cache_on"] == CONVERSATIONS * TURNS * 8 / on["seconds"]
        assert shape["ratio"] == shape["tokens_per_s_cache_on"] / shape["tokens_per_s_cache_off"] > 0
    assert result["ratio"] == result["shapes"][HEADLINE]["ratio"]
