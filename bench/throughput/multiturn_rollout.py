"""`swerve bench multiturn_rollout`: the CPU engine's prefix cache on multi-turn rollouts.

Eight conversations at once, eight turns each, as episodes send them: every turn re-sends the
whole conversation (prompt, earlier replies, observations) and asks for one reply. With the
cache (engine.prefix_cache_tokens) a turn prefills only its new tokens; without it, all of
them. The same scheduler and model run both, in this process (no HTTP, no Ray: the engine is
what is measured), greedy with fixed reply lengths, so the two must give identical tokens.
Two shapes of conversation: `default_run`, the lengths the default recipe's rollouts have
(medians over 6 steps of a `make run` RL stage: prompt 70 tokens plus the chat template,
observations 41, replies 20), and `long_replies`, every reply at the cap
(rollout.max_tokens_per_turn), a decode-bound bound on what the cache saves.
"""
from __future__ import annotations

import random
import statistics
import threading
import time

from configs import Config
from policies.seeds import derive_seed

CONVERSATIONS, TURNS = 8, 8
# Prompts and observations: conversation c's are drawn from derive_seed(SEED, c) and (SEED, c, turn).
SEED = 0
# name -> (prompt, observation, reply tokens); reply None: rollout.max_tokens_per_turn.
SHAPES = {"default_run": (85, 41, 20), "long_replies": (160, 48, None)}
HEADLINE = "default_run"


def _tokens(seed: int, n: int, vocab: int) -> list[int]:
    """n token ids drawn from `seed`, clear of the vocabulary's first and last 5 (special tokens)."""
    rng = random.Random(seed)
    return [rng.randrange(5, vocab - 5) for _ in range(n)]


def rollout(scheduler, vocab: int, prompt_tokens: int, observation_tokens: int, reply_tokens: int) -> dict:
    """Every conversation's turns, all conversations in flight together; the replies and time."""
    from policies.engines import protocol
    from policies.server.request import Request

    conversations = [_tokens(derive_seed(SEED, c), prompt_tokens, vocab) for c in range(CONVERSATIONS)]
    replies, started = [], time.perf_counter()
    for turn in range(TURNS):
        done = threading.Semaphore(0)
        requests = [Request(list(conv), protocol.SamplingParams(max_new_tokens=reply_tokens, temperature=0.0,
                                                                ignore_eos=True),
                            on_done=lambda r: done.release()) for conv in conversations]
        for request in requests:
            scheduler.submit(request)
        for _ in requests:
            if not done.acquire(timeout=600):
                raise TimeoutError("a multiturn_rollout turn did not finish in 600 s")
        replies.append([r.output_ids for r in requests])
        conversations = [conv + r.output_ids + _tokens(derive_seed(SEED, c, turn), observation_tokens, vocab)
                         for c, (conv, r) in enumerate(zip(conversations, requests))]
    seconds = time.perf_counter() - started
    turns = CONVERSATIONS * TURNS
    return {"seconds": seconds, "turns_per_s": turns / seconds, "tokens_per_s": turns * reply_tokens / seconds,
            "context_tokens_last_turn": len(conversations[0]), "replies": replies}


def multiturn_rollout(cfg: Config, repetitions: int) -> dict:
    from actors.stages.policy_setup import ensure_policy
    from policies.model import load_model

    import torch

    torch.set_num_threads(cfg.engine.torch_threads)  # as the server process runs (policies/server/state.py)
    _, model_path = ensure_policy(cfg)
    model = load_model(model_path)
    vocab = model.config.vocab_size
    cap = cfg.rollout.max_tokens_per_turn  # no reply is longer in a run
    shapes = {name: _compare(model, cfg, vocab, prompt, observation, min(reply or cap, cap), repetitions)
              for name, (prompt, observation, reply) in SHAPES.items()}
    head = shapes[HEADLINE]
    return {
        "figure": f"{TURNS}-turn rollouts at concurrency {CONVERSATIONS} ({HEADLINE} lengths): "
                  "tokens/s with the prefix cache / without",
        "ratio": head["ratio"], "baseline": head["tokens_per_s_cache_off"], "bound": None,
        "target": ">= 2x, token-identical",
        "met": head["ratio"] >= 2 and all(shape["token_identical"] for shape in shapes.values()),
        **{key: head[key] for key in ("tokens_per_s_cache_on", "tokens_per_s_cache_off", "turns_per_s_cache_on",
                                      "turns_per_s_cache_off", "token_identical")},
        "shapes": shapes,
        "setup": {"conversations": CONVERSATIONS, "turns": TURNS, "headline": HEADLINE,
                  "prefix_cache_tokens": cfg.engine.prefix_cache_tokens,
                  "model": f"{cfg.model.hidden_size} hidden x {cfg.model.num_layers} layers",
                  "torch_threads": cfg.engine.torch_threads},
    }


def _compare(model, cfg: Config, vocab: int, prompt_tokens: int, observation_tokens: int, reply_tokens: int,
             repetitions: int) -> dict:
    """The same conversations with the cache off and on, alternating, repetitions times each."""
    from policies.server.scheduler import Scheduler

    runs: dict = {"cache_off": [], "cache_on": []}
    replies: dict = {}
    for _ in range(max(repetitions, 1)):
        for name, cache_tokens in (("cache_off", 0), ("cache_on", cfg.engine.prefix_cache_tokens)):
            scheduler = Scheduler(model, max_batch_size=CONVERSATIONS, max_context_tokens=cfg.engine.max_context_tokens,
                                  prefix_cache_tokens=cache_tokens)
            try:
                result = rollout(scheduler, vocab, prompt_tokens, observation_tokens, reply_tokens)
            finally:
                scheduler.stop()
            replies[name] = result.pop("replies")
            runs[name].append(result)
    off = statistics.median(r["tokens_per_s"] for r in runs["cache_off"])
    on = statistics.median(r["tokens_per_s"] for r in runs["cache_on"])
    return {
        "ratio": on / off, "tokens_per_s_cache_on": on, "tokens_per_s_cache_off": off,
        "turns_per_s_cache_on": statistics.median(r["turns_per_s"] for r in runs["cache_on"]),
        "turns_per_s_cache_off": statistics.median(r["turns_per_s"] for r in runs["cache_off"]),
        "token_identical": replies["cache_on"] == replies["cache_off"],
        "prompt_tokens": prompt_tokens, "observation_tokens": observation_tokens, "reply_tokens": reply_tokens,
        "runs": runs,
    }
