import pytest
import torch

from policies.training.logprobs import sequence_logprobs

SEQUENCES = [[5, 17, 200, 33, 9, 41], [7, 100, 3]]


def _right_padded(pad_id: int):
    width = max(len(s) for s in SEQUENCES)
    ids = torch.full((len(SEQUENCES), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(SEQUENCES):
        ids[row, :len(seq)] = torch.tensor(seq)
        mask[row, :len(seq)] = 1
    return ids, mask


def _by_hand(model, seq, temperature):
    with torch.no_grad():
        logits = model(torch.tensor([seq])).logits[0].double() / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return [0.0] + [float(logp[t - 1, seq[t]]) for t in range(1, len(seq))]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_padded_batch_matches_each_sequence_alone(model, temperature):
    ids, mask = _right_padded(model.config.pad_token_id)
    with torch.no_grad():
        batched = sequence_logprobs(model, ids, mask, temperature=temperature)
    assert batched.shape == ids.shape
    for row, seq in enumerate(SEQUENCES):
        expected = torch.tensor(_by_hand(model, seq, temperature), dtype=batched.dtype)
        torch.testing.assert_close(batched[row, :len(seq)], expected, atol=1e-5, rtol=0)
        assert torch.all(batched[row, len(seq):] == 0)
    assert torch.all(batched[:, 0] == 0)


def test_left_padding_gives_the_same_values(model):
    seq = SEQUENCES[1]
    left = torch.tensor([[0, 0, 0] + seq])
    left_mask = torch.tensor([[0, 0, 0] + [1] * len(seq)])
    with torch.no_grad():
        values = sequence_logprobs(model, left, left_mask)[0, 3:]
    torch.testing.assert_close(values[1:], torch.tensor(_by_hand(model, seq, 1.0)[1:]),
                               atol=1e-5, rtol=0)


def test_is_differentiable(model):
    ids, mask = _right_padded(model.config.pad_token_id)
    model.zero_grad()
    sequence_logprobs(model, ids, mask).sum().backward()
    grad = model.model.embed_tokens.weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
    model.zero_grad(set_to_none=True)


def test_rejects_zero_temperature(model):
    ids, mask = _right_padded(model.config.pad_token_id)
    with pytest.raises(ValueError, match="temperature"):
        sequence_logprobs(model, ids, mask, temperature=0.0)
