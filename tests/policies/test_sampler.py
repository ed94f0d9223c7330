import contextlib

import pytest
import torch

from policies.logprobs import sequence_logprobs
from policies.sampler import SampleRequest, generate_batch

PROMPTS = [[5, 17, 200], [7, 100, 3, 44, 91, 12, 8], [30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41]]


@contextlib.contextmanager
def _fixed_version():
    yield 0


class _CountingGuard:
    """Each forward sees a new policy version, as if weights were pushed between every step."""

    def __init__(self):
        self.calls = 0

    @contextlib.contextmanager
    def __call__(self):
        version = self.calls
        self.calls += 1
        yield version


def _greedy(prompt, max_new_tokens=10, stop=()):
    return SampleRequest(prompt_ids=prompt, max_new_tokens=max_new_tokens, temperature=0.0,
                         stop_token_ids=stop)


def test_greedy_batch_equals_one_at_a_time(model):
    batched = generate_batch(model, [_greedy(p) for p in PROMPTS], _fixed_version)
    for prompt, out in zip(PROMPTS, batched):
        alone = generate_batch(model, [_greedy(prompt)], _fixed_version)[0]
        assert out.token_ids == alone.token_ids
        assert out.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
        assert out.finish_reason == "length" and len(out.token_ids) == 10


def test_greedy_matches_full_forward_argmax(model):
    out = generate_batch(model, [_greedy(PROMPTS[0], max_new_tokens=6)], _fixed_version)[0]
    ids = list(PROMPTS[0])
    for token in out.token_ids:
        with torch.no_grad():
            assert token == int(model(torch.tensor([ids])).logits[0, -1].argmax())
        ids.append(token)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_recomputation(model, temperature):
    requests = [SampleRequest(prompt_ids=p, max_new_tokens=12, temperature=temperature, seed=i)
                for i, p in enumerate(PROMPTS)]
    outputs = generate_batch(model, requests, _fixed_version)
    for prompt, out in zip(PROMPTS, outputs):
        ids = torch.tensor([prompt + out.token_ids])
        with torch.no_grad():
            recomputed = sequence_logprobs(model, ids, torch.ones_like(ids), temperature)
        torch.testing.assert_close(recomputed[0, len(prompt):],
                                   torch.tensor(out.logprobs), atol=1e-4, rtol=0)


def test_stop_token_ends_only_its_row(model):
    free = generate_batch(model, [_greedy(p) for p in PROMPTS], _fixed_version)
    stop_token = free[0].token_ids[3]
    first = free[0].token_ids.index(stop_token)
    outputs = generate_batch(model, [_greedy(p, stop=(stop_token,)) for p in PROMPTS],
                             _fixed_version)
    assert outputs[0].finish_reason == "stop"
    assert outputs[0].token_ids == free[0].token_ids[:first + 1]
    for row in (1, 2):
        if stop_token in free[row].token_ids:
            continue
        assert outputs[row].finish_reason == "length"
        assert outputs[row].token_ids == free[row].token_ids


def test_versions_follow_the_guard(model):
    guard = _CountingGuard()
    requests = [_greedy(PROMPTS[0], max_new_tokens=3), _greedy(PROMPTS[1], max_new_tokens=5)]
    short, long = generate_batch(model, requests, guard)
    assert short.versions == [0, 1, 2]
    assert long.versions == [0, 1, 2, 3, 4]
    assert guard.calls == 5  # one prefill + four decode steps, no wasted forward


def test_weight_swap_between_steps_changes_the_policy(model_path):
    from policies.model import load_model

    swapped = load_model(model_path)
    fresh = load_model(model_path)
    guard = _CountingGuard()

    @contextlib.contextmanager
    def swap_after_prefill():
        with guard() as version:
            if version == 1:
                with torch.no_grad():
                    for param in swapped.parameters():
                        param.mul_(-1.0)
            yield version

    request = _greedy(PROMPTS[1], max_new_tokens=4)
    out = generate_batch(swapped, [request], swap_after_prefill)[0]
    unswapped = generate_batch(fresh, [request], _fixed_version)[0]
    assert out.versions == [0, 1, 2, 3]
    assert out.token_ids[0] == unswapped.token_ids[0]
    assert out.logprobs[0] == pytest.approx(unswapped.logprobs[0], abs=1e-5)
    assert out.logprobs[1:] != pytest.approx(unswapped.logprobs[1:], abs=1e-3)


def test_seeded_sampling_is_reproducible_and_batch_independent(model):
    request = SampleRequest(prompt_ids=PROMPTS[1], max_new_tokens=10, temperature=1.0, seed=42)
    alone = generate_batch(model, [request], _fixed_version)[0]
    neighbour = SampleRequest(prompt_ids=PROMPTS[2], max_new_tokens=4, temperature=1.0, seed=7)
    in_batch = generate_batch(model, [neighbour, request], _fixed_version)[1]
    assert alone.token_ids == in_batch.token_ids


def test_tiny_top_p_is_greedy(model):
    request = SampleRequest(prompt_ids=PROMPTS[2], max_new_tokens=8, temperature=1.0,
                            top_p=1e-6, seed=3)
    sampled = generate_batch(model, [request], _fixed_version)[0]
    greedy = generate_batch(model, [_greedy(PROMPTS[2], max_new_tokens=8)], _fixed_version)[0]
    assert sampled.token_ids == greedy.token_ids


def test_zero_max_new_tokens_and_validation(model):
    out = generate_batch(model, [_greedy(PROMPTS[0], max_new_tokens=0)], _fixed_version)[0]
    assert out.token_ids == [] and out.finish_reason == "length"
    with pytest.raises(ValueError, match="prompt_ids"):
        generate_batch(model, [_greedy([], max_new_tokens=1)], _fixed_version)
    with pytest.raises(ValueError, match="top_p"):
        generate_batch(model, [SampleRequest(PROMPTS[0], 1, top_p=0.0)], _fixed_version)
