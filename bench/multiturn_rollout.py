"""`swerve bench multiturn_rollout`: the CPU engine's prefix cache on multi-turn rollouts.

Eight conversations at once, eight turns each, as episodes send them: every turn re-sends the
whole conversation (prompt, earlier replies, observations) and asks for one reply. With the
cache (engine.prefix_cache_tokens) a turn prefills only its new tokens; without it, all of
them. The same scheduler and model run both, in this process (no HTTP, no Ray: the engine is
what is measured), greedy with fixed reply lengths, so the two must give identical tokens.
"""
from __future__ import annotations

import statistics
import threading
import time

from configs import Config

CONVERSATIONS, TURNS = 8, 8
PROMPT_TOKENS, OBSERVATION_TOKENS = 160, 48


def _tokens(seed: int, n: int, vocab: int) -> list[int]:
    return [(seed * 7919 + j * 104729) % (vocab - 10) + 5 for j in range(n)]


def rollout(scheduler, vocab: int, reply_tokens: int) -> dict:
    """Every conversation's turns, all conversations in flight together; the replies and time."""
    from policies.server import protocol
    from policies.server.request import Request

    conversations = [_tokens(c, PROMPT_TOKENS, vocab) for c in range(CONVERSATIONS)]
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
        conversations = [conv + r.output_ids + _tokens(100 + turn * CONVERSATIONS + c, OBSERVATION_TOKENS, vocab)
                         for c, (conv, r) in enumerate(zip(conversations, requests))]
    seconds = time.perf_counter() - started
    turns = CONVERSATIONS * TURNS
    return {"seconds": seconds, "turns_per_s": turns / seconds, "tokens_per_s": turns * reply_tokens / seconds,
            "context_tokens_last_turn": len(conversations[0]), "replies": replies}


def multiturn_rollout(cfg: Config, repetitions: int) -> dict:
    from actors.policy_setup import ensure_policy
    from policies.model import load_model
    from policies.server.scheduler import Scheduler

    import torch

    torch.set_num_threads(cfg.engine.torch_threads)  # as the server process runs (policies/server/state.py)
    _, model_path = ensure_policy(cfg)
    model = load_model(model_path)
    vocab = model.config.vocab_size
    reply_tokens = cfg.rollout.max_tokens_per_turn
    runs: dict = {"cache_off": [], "cache_on": []}
    replies: dict = {}
    for _ in range(max(repetitions, 1)):
        for name, cache_tokens in (("cache_off", 0), ("cache_on", cfg.engine.prefix_cache_tokens)):
            scheduler = Scheduler(model, max_batch_size=CONVERSATIONS, max_context_tokens=cfg.engine.max_context_tokens,
                                  prefix_cache_tokens=cache_tokens)
            try:
                result = rollout(scheduler, vocab, reply_tokens)
            finally:
                scheduler.stop()
            replies[name] = result.pop("replies")
            runs[name].append(result)
    off = statistics.median(r["tokens_per_s"] for r in runs["cache_off"])
    on = statistics.median(r["tokens_per_s"] for r in runs["cache_on"])
    return {
        "figure": f"{TURNS}-turn rollouts at concurrency {CONVERSATIONS}: tokens/s with the prefix cache / without",
        "ratio": on / off, "baseline": off, "bound": None, "target": ">= 2x, token-identical",
        "met": on >= 2 * off and replies["cache_on"] == replies["cache_off"],
        "tokens_per_s_cache_on": on, "tokens_per_s_cache_off": off,
        "turns_per_s_cache_on": statistics.median(r["turns_per_s"] for r in runs["cache_on"]),
        "turns_per_s_cache_off": statistics.median(r["turns_per_s"] for r in runs["cache_off"]),
        "token_identical": replies["cache_on"] == replies["cache_off"],
        "setup": {"conversations": CONVERSATIONS, "turns": TURNS, "prompt_tokens": PROMPT_TOKENS,
                  "observation_tokens": OBSERVATION_TOKENS, "reply_tokens": reply_tokens,
                  "prefix_cache_tokens": cfg.engine.prefix_cache_tokens,
                  "model": f"{cfg.model.hidden_size} hidden x {cfg.model.num_layers} layers",
                  "torch_threads": cfg.engine.torch_threads},
        "runs": runs,
    }
