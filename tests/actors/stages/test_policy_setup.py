"""The policy's files do not depend on how many tasks there are: a larger train split or a stream
that has handed out thousands of tasks leaves the tokenizer and every cached model as they were."""
import os

import pytest

from actors.stages.policy_setup import ensure_policy, ensure_run_tokenizer, harness_vocabulary
from configs import load_config
from envs.tasks import micro
from envs.tasks.micro_stream import MicroStream
from policies.tokenizer import load_tokenizer


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

    assert micro.corpus_texts.__wrapped__() == texts  # generated again: the same corpus, so the same cache key
    assert ensure_policy(cfg) == (tokenizer, model)
    assert _mtimes(tokenizer, model) == built  # found in the cache, not rebuilt


@pytest.mark.slow
@pytest.mark.parametrize("config", ["default", "text"])
def test_a_harness_run_s_tokenizer_makes_the_harness_s_fixed_prompt_a_third_of_what_it_was(tmp_path, config):
    """The first request mini-swe-agent sends (its system and instance templates around a task, its
    tool) costs the plain tokenizer ~1.2-1.5k tokens beyond the task's own; the harness run's, at most a third."""
    overrides = [f"tokenizer.cache_dir={tmp_path}", f"env.harness.mini_swe_agent_config={config}"]
    harness_cfg = load_config("configs/harness_mini_swe_agent.yaml", overrides)
    vocabulary = harness_vocabulary(harness_cfg)
    assert vocabulary is not None and harness_vocabulary(load_config(None, overrides)) is None
    task = micro.generate("eval", 1)[0].problem_statement
    system, instance = vocabulary.texts[0], vocabulary.texts[1]
    messages = [{"role": "system", "content": system}, {"role": "user", "content": instance + task}]

    def fixed_cost(tokenizer_dir):
        tok = load_tokenizer(tokenizer_dir)
        ids = tok.apply_chat_template(messages, tools=list(vocabulary.tools) or None, add_generation_prompt=True)
        return len(ids) - len(tok(task)["input_ids"])

    plain = fixed_cost(ensure_run_tokenizer(load_config(None, overrides)))
    trained = fixed_cost(ensure_run_tokenizer(harness_cfg))
    assert trained * 3 <= plain, (trained, plain)
