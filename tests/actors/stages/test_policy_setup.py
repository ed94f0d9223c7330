"""The policy's files do not depend on how many tasks there are: a larger train split or a stream
that has handed out thousands of tasks leaves the tokenizer and every cached model as they were."""
import os

import pytest

from actors.stages.policy_setup import ensure_policy
from configs import load_config
from envs.tasks import micro
from envs.tasks.micro_stream import MicroStream


def _mtimes(*dirs):
    return {os.path.join(d, name): os.stat(os.path.join(d, name)).st_mtime_ns for d in dirs for name in os.listdir(d)}


@pytest.mark.slow
def test_the_tokenizer_and_cached_model_do_not_change_when_the_tasks_grow(tmp_path, monkeypatch):
    monkeypatch.setenv("SWERVE_CACHE_DIR", str(tmp_path / "tasks"))
    cfg = load_config("tests/smoke.yaml", [f"model.cache_dir={tmp_path}", f"tokenizer.cache_dir={tmp_path}"])
    texts = micro.corpus_texts()
    tokenizer, model = ensure_policy(cfg)
    built = _mtimes(tokenizer, model)

    monkeypatch.setitem(micro.SPLIT_SIZES, "train", 3 * micro.SPLIT_SIZES["train"])
    stream = MicroStream(seed=0)
    drawn = [stream.task(i) for i in range(300)]
    assert len(micro.generate("train")) == 3 * micro.CORPUS_TASKS and drawn

    assert micro.corpus_texts() == texts  # the same corpus, so the same tokenizer cache key
    assert ensure_policy(cfg) == (tokenizer, model)
    assert _mtimes(tokenizer, model) == built  # found in the cache, not rebuilt
