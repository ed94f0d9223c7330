"""Token sampling as the CPU server's scheduler does it (policies.server.sampler), and the log-probs
the trainer must reproduce from it."""
import threading

import pytest
import torch

from policies.training.logprobs import sequence_logprobs
from policies.server.sampler import make_generator, pick_tokens, sample_token
from policies.engines import protocol
from policies.server.request import Request
from policies.server.scheduler import Scheduler

PROMPTS = [[5, 17, 200], [7, 100, 3, 44, 91, 12, 8], [30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41]]
LOGITS = torch.tensor([[2.0, 1.0, 0.5, -1.0], [0.1, 0.2, 3.0, 0.0], [1.0, 1.0, 1.0, 1.0]])


def test_greedy_takes_the_argmax_and_reports_the_temperature_1_logprob():
    token, logprob = sample_token(LOGITS[0], 0.0, 1.0, None)
    assert token == 0 and logprob == pytest.approx(float(torch.log_softmax(LOGITS[0], -1)[0]))


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 1.0), (0.7, 0.5)])
def test_the_logprob_is_taken_at_the_temperature_before_top_p(temperature, top_p):
    token, logprob = sample_token(LOGITS[2], temperature, top_p, make_generator(0, torch.device("cpu")))
    assert logprob == pytest.approx(float(torch.log_softmax(LOGITS[2] / temperature, -1)[token]))


def test_tiny_top_p_keeps_only_the_top_token():
    for seed in range(5):
        assert sample_token(LOGITS[1], 1.0, 1e-6, make_generator(seed, torch.device("cpu")))[0] == 2


def test_batched_picks_equal_one_row_at_a_time():
    temperatures, top_ps, seeds = [0.0, 0.7, 1.0], [1.0, 0.9, 1.0], [None, 3, 4]
    device = torch.device("cpu")
    batched = pick_tokens(LOGITS, temperatures, top_ps, [make_generator(s, device) if s is not None else None
                                                         for s in seeds])
    for row, (temperature, top_p, seed) in enumerate(zip(temperatures, top_ps, seeds)):
        generator = make_generator(seed, device) if seed is not None else None
        token, logprob = sample_token(LOGITS[row], temperature, top_p, generator)
        assert batched[row][0] == token and batched[row][1] == pytest.approx(logprob, abs=1e-6)


def test_a_seed_reproduces_its_draws():
    device = torch.device("cpu")
    draws = [[sample_token(LOGITS[2], 1.0, 1.0, g)[0] for _ in range(20)]
             for g in (make_generator(9, device), make_generator(9, device))]
    assert draws[0] == draws[1]


# -- through the scheduler: what the engines serve -------------------------------------------------
def _run(model, requests):
    scheduler = Scheduler(model, max_batch_size=8, max_context_tokens=256, prefix_cache_tokens=0)
    done = threading.Semaphore(0)
    for request in requests:
        request.on_done = lambda r: done.release()
        scheduler.submit(request)
    try:
        for _ in requests:
            assert done.acquire(timeout=60)
    finally:
        scheduler.stop()
    return requests


def _request(prompt, max_new_tokens=10, **params):
    return Request(list(prompt), protocol.SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True, **params))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_served_logprobs_match_the_trainers_recomputation(model, temperature):
    outputs = _run(model, [_request(p, 12, temperature=temperature, sampling_seed=i) for i, p in enumerate(PROMPTS)])
    for prompt, out in zip(PROMPTS, outputs):
        ids = torch.tensor([prompt + out.output_ids])
        with torch.no_grad():
            recomputed = sequence_logprobs(model, ids, torch.ones_like(ids), temperature)
        torch.testing.assert_close(recomputed[0, len(prompt):], torch.tensor(out.logprobs), atol=1e-4, rtol=0)


def test_a_seeded_request_draws_the_same_tokens_alone_and_in_a_batch(model):
    alone = _run(model, [_request(PROMPTS[1], temperature=1.0, sampling_seed=42)])[0]
    neighbour = _request(PROMPTS[2], 4, temperature=1.0, sampling_seed=7)
    in_batch = _run(model, [neighbour, _request(PROMPTS[1], temperature=1.0, sampling_seed=42)])[1]
    assert alone.output_ids == in_batch.output_ids


def test_tiny_top_p_serves_the_greedy_tokens(model):
    sampled = _run(model, [_request(PROMPTS[2], 8, temperature=1.0, top_p=1e-6, sampling_seed=3)])[0]
    greedy = _run(model, [_request(PROMPTS[2], 8, temperature=0.0)])[0]
    assert sampled.output_ids == greedy.output_ids
