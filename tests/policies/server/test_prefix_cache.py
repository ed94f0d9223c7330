"""The CPU server's prefix cache: a conversation's next turn reuses its KV and gets the same tokens."""
from __future__ import annotations

import threading

import pytest
import torch

from policies.engines import protocol
from policies.server.prefix_cache import PrefixCache
from policies.server.request import Request
from policies.server.scheduler import Scheduler


def run(scheduler, prompts, max_new_tokens=6, temperature=0.0, seed=7):
    """Submit every prompt at once (one batch) and wait for all of them."""
    done = threading.Semaphore(0)
    requests = [Request(list(p), protocol.SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature,
                                                         ignore_eos=True, sampling_seed=seed),
                        return_logprob=True, on_done=lambda r: done.release()) for p in prompts]
    for r in requests:
        scheduler.submit(r)
    for _ in requests:
        assert done.acquire(timeout=60)
    return requests


def conversation(scheduler, turns=3, width=2, temperature=0.0):
    """`width` conversations in parallel, each turn = last prompt + reply + a new observation."""
    prompts = [[5 + i, 17, 42 + i, 9, 3] for i in range(width)]
    outputs = []
    for turn in range(turns):
        done = run(scheduler, prompts, temperature=temperature, seed=turn)
        outputs.append([(r.output_ids, r.logprobs) for r in done])
        prompts = [p + r.output_ids + [11 + turn, 13, 7 + turn] for p, r in zip(prompts, done)]
    return outputs


@pytest.fixture()
def schedulers(model):
    plain = Scheduler(model, max_batch_size=8, max_context_tokens=256, prefix_cache_tokens=0)
    cached = Scheduler(model, max_batch_size=8, max_context_tokens=256, prefix_cache_tokens=4096)
    yield plain, cached
    plain.stop()
    cached.stop()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_cached_turns_give_the_tokens_and_logprobs_of_a_full_prefill(schedulers, temperature):
    plain, cached = schedulers
    want = conversation(plain, temperature=temperature)
    got = conversation(cached, temperature=temperature)
    for (w_ids, w_lp), (g_ids, g_lp) in zip(sum(want, []), sum(got, [])):
        assert g_ids == w_ids
        torch.testing.assert_close(torch.tensor(g_lp), torch.tensor(w_lp), rtol=0, atol=1e-5)
    stats = cached.stats()
    # Turns 2 and 3 of both conversations hit; each reuses all but the new observation.
    assert stats["prefix_cache_hits"] == 4 and stats["prefix_cache_hit_tokens"] > 4 * 5
    assert plain.stats()["prefix_cache_hits"] == 0


def test_a_batch_mixing_hits_and_misses_matches(schedulers):
    plain, cached = schedulers
    first = run(cached, [[4, 8, 15, 16, 23]])[0]
    follow = [4, 8, 15, 16, 23] + first.output_ids + [42, 1]
    other = [30, 31, 32]
    got = run(cached, [follow, other])
    want = run(plain, [follow, other])
    assert [r.output_ids for r in got] == [r.output_ids for r in want]
    for g, w in zip(got, want):
        torch.testing.assert_close(torch.tensor(g.logprobs), torch.tensor(w.logprobs), rtol=0, atol=1e-5)
    assert cached.stats()["prefix_cache_hits"] == 1


def test_a_weight_update_empties_the_cache(schedulers, model):
    _, cached = schedulers
    run(cached, [[1, 2, 3, 4]])
    assert cached.stats()["prefix_cache_tokens"] > 0
    state = {k: v.clone() for k, v in model.state_dict().items()}
    cached.update_weights(state, "1").result(timeout=30)
    assert cached.stats()["prefix_cache_tokens"] == 0
    assert cached.flush_cache().result(timeout=30) is True


def test_lru_keeps_the_token_budget_and_drops_entries_a_longer_one_extends():
    kv = lambda n: [(torch.zeros(2, n, 4), torch.zeros(2, n, 4))]  # noqa: E731
    cache = PrefixCache(max_tokens=10)
    cache.put([1, 2, 3], kv(3))
    cache.put([1, 2, 3, 4, 5], kv(5))        # extends the first: it replaces it
    assert len(cache) == 1 and cache.tokens == 5
    cache.put([9, 9, 9, 9], kv(4))
    cache.put([7, 7, 7], kv(3))              # over budget: the least recently used goes
    assert cache.tokens <= 10 and cache.match([1, 2, 3, 4, 5, 6])[0] == 0
    n, layers = cache.match([9, 9, 9, 9, 1])
    assert n == 4 and layers[0][0].shape == (2, 4, 4)
    assert cache.match([9, 9, 9, 9])[0] == 3  # one token is always left to prefill
    with pytest.raises(ValueError, match="another length"):
        cache.put([1, 2], kv(3))
