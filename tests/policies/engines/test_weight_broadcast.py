import os

import pytest
import torch
import torch.multiprocessing as mp

from policies.engines.process import free_port


# The trainer's side of the NCCL weight broadcast (TrainerShard.broadcast_weights calls it).
def _engine_side(port, backend, announced, out_dir):
    """Mimics SGLang's receiver: join at rank_offset 1, then per announced bucket allocate and
    receive every tensor with broadcast(src=0) in the announced order."""
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    from policies.engines.weight_broadcast import init_weight_update_group

    if backend == "nccl":
        torch.cuda.set_device(1)
    group = init_weight_update_group("127.0.0.1", port, 2, rank=1, backend=backend)
    device = "cuda" if backend == "nccl" else "cpu"
    received = {}
    while True:
        item = announced.get(timeout=120)
        if item is None:
            break
        names, dtypes, shapes = item
        tensors = [torch.empty(s, dtype=getattr(torch, d), device=device) for d, s in zip(dtypes, shapes)]
        works = [torch.distributed.broadcast(t, src=0, group=group, async_op=True) for t in tensors]
        for work in works:
            work.wait()
        received.update({n: t.cpu() for n, t in zip(names, tensors)})
    torch.save(received, os.path.join(out_dir, "received.pt"))
    torch.distributed.destroy_process_group(group)


def _broadcast_roundtrip(backend: str, tmp_path):
    from policies.engines.weight_broadcast import broadcast_weights_nccl, init_weight_update_group

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    ctx = mp.get_context("spawn")
    announced = ctx.Queue()
    port = free_port()
    engine = ctx.Process(target=_engine_side, args=(port, backend, announced, str(tmp_path)))
    engine.start()
    try:
        if backend == "nccl":
            torch.cuda.set_device(0)
        group = init_weight_update_group("127.0.0.1", port, 2, rank=0, backend=backend)
        weights = {f"layer{i}.weight": torch.randn(64, 32) for i in range(5)}
        weights["norm.weight"] = torch.randn(32).to(torch.bfloat16)
        calls = []

        def announce(names, dtypes, shapes):
            calls.append(names)
            announced.put((names, dtypes, shapes))

        device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
        stats = broadcast_weights_nccl(weights.items(), group, announce, bucket_bytes=3 * 64 * 32 * 4, device=device)
        announced.put(None)
        engine.join(timeout=120)
        assert engine.exitcode == 0
        received = torch.load(tmp_path / "received.pt", weights_only=False)
        assert stats["calls"] == len(calls) == 2 and set(received) == set(weights)
        for name, value in weights.items():
            assert received[name].dtype == value.dtype and torch.equal(received[name], value)
        torch.distributed.destroy_process_group(group)
    finally:
        if engine.is_alive():
            engine.kill()


@pytest.mark.slow
def test_weight_broadcast_protocol_over_gloo(tmp_path):
    """The NCCL path's code, run over gloo on CPU against an SGLang-style receiver."""
    _broadcast_roundtrip("gloo", tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="gpu: NCCL weight broadcast needs two CUDA GPUs")
def test_weight_broadcast_over_nccl(tmp_path):
    # NCCL refuses two ranks on one device, so this needs two GPUs (trainer 0, engine 1).
    _broadcast_roundtrip("nccl", tmp_path)
