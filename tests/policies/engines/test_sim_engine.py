"""engine.backend=sim: the scripted agent's plans, batching under max_batch_size, versions."""
import random
import statistics
import threading
import time
from dataclasses import replace

import pytest

from policies.engines.sim_engine import MARKER, SimEngine, draw_plan, plan_turns, workload_means
from configs.schema import EngineConfig, SimEngineConfig
from envs.actions import SUBMIT, parse_action
from policies.chat.conversation import Conversation
from policies.sample_types import SampleRequest
from policies.tokenizer import load_tokenizer

FAST = SimEngineConfig(step_base_s=0.0005, step_per_request_s=0.0001)


def engine_with(model_path, **sim):
    return SimEngine(0, EngineConfig(backend="sim", max_batch_size=2, sim=replace(FAST, **sim)), model_path)


def play(engine, tokenizer, seed: int, max_turns: int = 20) -> list:
    """One scripted episode: the replies' texts until the agent submits or the cap."""
    conv, texts = Conversation(tokenizer, "system", "fix the bug"), []
    for _ in range(max_turns):
        out = engine.generate(SampleRequest(list(conv.token_ids), 400, seed=seed))
        texts.append(conv.append_generation(out.token_ids, out.logprobs, out.versions))
        assert out.finish_reason == "stop" and len(out.versions) == len(out.token_ids)
        if parse_action(texts[-1]).kind == SUBMIT:
            break
        conv.append_observation("exit code: 0\nREADME.md")
    return texts


def test_a_plan_is_kept_across_turns_and_ends_in_submit(model_path):
    engine = engine_with(model_path, cap_fraction=0.0, submit_turn_min=3, submit_turn_max=5,
                         tokens_per_turn_min=30, tokens_per_turn_max=30)
    tokenizer = load_tokenizer(model_path)
    try:
        for seed in range(4):
            texts = play(engine, tokenizer, seed)
            plans = [MARKER.search(t).groups() for t in texts]
            assert len({(tokens, submit) for tokens, submit, _ in plans}) == 1  # one plan per trajectory
            assert [int(turn) for _, _, turn in plans] == list(range(1, len(texts) + 1))
            assert 3 <= len(texts) <= 5 and len(texts) == int(plans[0][1])
            assert all(parse_action(t).kind == "command" for t in texts[:-1])
    finally:
        engine.close()


def test_replies_have_the_planned_length_and_a_short_budget_cuts_them(model_path):
    engine = engine_with(model_path, tokens_per_turn_min=40, tokens_per_turn_max=40)
    tokenizer = load_tokenizer(model_path)
    prompt = Conversation(tokenizer, "system", "fix the bug").token_ids
    try:
        full = engine.generate(SampleRequest(list(prompt), 400, seed=1))
        assert len(full.token_ids) == 40 and full.token_ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
        cut = engine.generate(SampleRequest(list(prompt), 10, seed=1))
        assert cut.token_ids == full.token_ids[:10] and cut.finish_reason == "length"
    finally:
        engine.close()


def test_a_stop_string_ends_the_reply_at_the_token_that_completes_it(model_path):
    engine = engine_with(model_path, tokens_per_turn_min=40, tokens_per_turn_max=40)
    tokenizer = load_tokenizer(model_path)
    prompt = Conversation(tokenizer, "system", "fix the bug").token_ids
    try:
        full = engine.generate(SampleRequest(list(prompt), 400, seed=1))
        cut = engine.generate(SampleRequest(list(prompt), 400, seed=1, stop=("[sim plan",)))
        # As a real engine: the first token whose text holds the stop ends it, and is kept.
        assert cut.token_ids == full.token_ids[:len(cut.token_ids)] and cut.finish_reason == "stop"
        assert "[sim plan" in tokenizer.decode(cut.token_ids) and "[sim plan" not in tokenizer.decode(cut.token_ids[:-1])
        assert len(cut.logprobs) == len(cut.versions) == len(cut.token_ids) < len(full.token_ids)
        absent = engine.generate(SampleRequest(list(prompt), 400, seed=1, stop=("no such text",)))
        assert absent.token_ids == full.token_ids and absent.finish_reason == "stop"
    finally:
        engine.close()


def test_batch_never_exceeds_max_batch_size_and_tokens_carry_versions(model_path):
    engine = engine_with(model_path, step_base_s=0.002, tokens_per_turn_min=40, tokens_per_turn_max=40)
    prompt = Conversation(load_tokenizer(model_path), "system", "fix the bug").token_ids
    outs = [None] * 5

    def one(i):
        outs[i] = engine.generate(SampleRequest(list(prompt), 400, seed=i))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(5)]
    try:
        for t in threads:
            t.start()
        engine.update_weights(None, 7)
        for t in threads:
            t.join()
        stats = engine.stats()
        assert 1.0 <= stats["batch_mean"] <= 2.0  # five requests, at most two decode at once
        assert stats["served"] == 5 and 0.0 < stats["busy_fraction"] <= 1.0 and engine.version() == 7
        for out in outs:
            assert out.versions == sorted(out.versions) and set(out.versions) <= {0, 7}
        assert outs[-1].versions[-1] == 7  # the queued ones finished under the new weights
    finally:
        engine.close()


def test_reference_workload_matches_its_calibration():
    """84% reach the turn cap, successful ones a median of 8 turns, lengths differ up to 2.5x."""
    from bench.throughput.async_vs_sync import MAX_TURNS, WORKLOADS

    sim = replace(SimEngineConfig(), **WORKLOADS["reference"])
    rng = random.Random(0)
    plans = [draw_plan(sim, rng) for _ in range(20_000)]
    assert workload_means(sim, MAX_TURNS)["capped_fraction"] == pytest.approx(0.84, abs=0.01)
    assert statistics.median(plan_turns(p, MAX_TURNS) for p in plans if p.submit_turn) == 8
    lengths = [p.tokens_per_turn for p in plans]
    assert max(lengths) / min(lengths) == pytest.approx(2.5)
    heavy = replace(SimEngineConfig(), **WORKLOADS["heavy_tail"])
    tail = sorted(draw_plan(heavy, rng).tokens_per_turn for _ in range(20_000))
    assert tail[-1] / tail[0] > 3 * 2.5 and statistics.median(tail) < statistics.fmean(tail)  # a long right tail


@pytest.mark.parametrize("priority,first", [("age", "old"), ("fifo", "young")])
def test_a_full_batch_decodes_the_oldest_trajectories_first_under_age_priority(model_path, priority, first):
    cfg = EngineConfig(backend="sim", max_batch_size=1, priority=priority,
                       sim=replace(FAST, tokens_per_turn_min=60, tokens_per_turn_max=60))
    engine = SimEngine(0, cfg, model_path)
    finished = []
    try:
        def generate(name, prio):
            engine.generate(SampleRequest([1, 2, 3], 400, seed=1, priority=prio))
            finished.append(name)
        young = threading.Thread(target=generate, args=("young", -100))
        young.start()
        while not engine.stats()["running"]:
            time.sleep(0.001)
        old = threading.Thread(target=generate, args=("old", 100))  # arrives later, older trajectory
        old.start()
        young.join(30)
        old.join(30)
        assert finished[0] == first and len(finished) == 2
    finally:
        engine.close()
