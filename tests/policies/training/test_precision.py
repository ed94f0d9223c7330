import json

import pytest
import torch

from configs.schema import SFTConfig
from policies.training.logprobs import sequence_logprobs
from policies.training.precision import autocast, bf16_pays_off, use_bf16
from policies.training.sft import run_sft

CPU = torch.device("cpu")


def test_modes_resolve_and_a_wrong_one_is_named():
    assert use_bf16("off", CPU) is False and use_bf16("bf16", CPU) is True
    assert use_bf16("auto", CPU) is bf16_pays_off("cpu")  # measured once, then the same answer
    assert bf16_pays_off("meta") is False
    with pytest.raises(ValueError, match="auto, off, bf16"):
        use_bf16("fp8", CPU)


def test_autocast_computes_in_bf16_and_stays_close_to_fp32(model):
    ids = torch.tensor([[1, 5, 9, 12, 7, 3, 8, 2]])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        exact = sequence_logprobs(model, ids, mask)
        with autocast(False, CPU):
            assert torch.equal(sequence_logprobs(model, ids, mask), exact)
        with autocast(True, CPU):
            mixed = sequence_logprobs(model, ids, mask)
    assert mixed.dtype == torch.float32  # the loss side stays fp32
    difference = (mixed - exact).abs().max().item()
    assert 0 < difference < 0.1, difference


def test_sft_in_bf16_trains_like_fp32_and_says_so(model_path, tokenizer_path, tmp_path):
    row = {"token_ids": [1, 5, 9, 12, 7, 7, 7, 4, 9, 12], "loss_mask": [0, 0, 0, 0, 1, 1, 1, 1, 1, 1], "resolved": True}
    path = tmp_path / "tokens.jsonl"
    path.write_text(json.dumps(row) + "\n")
    summaries = {}
    for mode in ("off", "bf16"):
        cfg = SFTConfig(lr=3e-3, batch_size=1, epochs=0, max_steps=8, seed=0, mixed_precision=mode)
        summaries[mode] = run_sft(model_path, tokenizer_path, str(path), str(tmp_path / mode), cfg)
    assert summaries["off"]["bf16_autocast"] is False and summaries["bf16"]["bf16_autocast"] is True
    off, mixed = summaries["off"]["losses"], summaries["bf16"]["losses"]
    assert off != mixed  # autocast was in effect
    assert mixed[-1] < 0.7 * mixed[0]
    # The same curve to bf16's precision (fp32 master weights: the rounding does not accumulate).
    assert all(abs(m - o) < 0.02 * o for m, o in zip(mixed, off)), (off, mixed)
