import threading

import torch

from actors.engine_actor import EngineActor
from configs.schema import EngineConfig
from policies.sampler import SampleRequest


def run_concurrently(engine, requests):
    results = [None] * len(requests)

    def go(i):
        results[i] = engine.generate(requests[i])

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_concurrent_requests_share_decoding_batches(model_path):
    engine = EngineActor(0, EngineConfig(batch_wait_s=0.05), model_path)
    outs = run_concurrently(engine, [SampleRequest([1, 5, 9, 12], 8, seed=i) for i in range(6)])
    assert all(len(o.token_ids) == 8 and o.finish_reason == "length" for o in outs)
    stats = engine.stats()
    assert stats["served"] == 6 and stats["kv_usage_peak"] > 0
    assert all(v == 0 for o in outs for v in o.versions)


def test_weight_update_changes_version_and_outputs(model_path):
    engine = EngineActor(0, EngineConfig(), model_path)
    request = SampleRequest([1, 5, 9, 12], 6, temperature=0.0)
    before = engine.generate(request)
    state = {k: v + 0.05 * torch.randn_like(v) for k, v in engine.model.state_dict().items()}
    assert engine.update_weights(state, 7) == 7
    after = engine.generate(request)
    assert after.versions == [7] * len(after.token_ids)
    assert before.versions == [0] * len(before.token_ids)
    assert after.logprobs != before.logprobs


def test_context_cap_limits_new_tokens(model_path):
    engine = EngineActor(0, EngineConfig(max_context_tokens=10), model_path)
    out = engine.generate(SampleRequest(list(range(1, 8)), 50))
    assert len(out.token_ids) == 3 and out.finish_reason == "length"
    full = engine.generate(SampleRequest(list(range(1, 12)), 5))
    assert full.token_ids == [] and full.finish_reason == "length"
