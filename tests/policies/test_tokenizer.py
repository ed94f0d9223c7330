import os
import subprocess
import sys
import time

import pytest
from transformers import AutoTokenizer

from configs.schema import TokenizerConfig
from policies.tokenizer import IM_END, IM_START, PAD_TOKEN, ensure_tokenizer, load_tokenizer


def test_explicit_path_is_returned(tmp_path):
    assert ensure_tokenizer(TokenizerConfig(path=str(tmp_path)), ()) == str(tmp_path)


def test_missing_path_names_the_key(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.path"):
        ensure_tokenizer(TokenizerConfig(path=str(tmp_path / "nope")), ())


def test_trained_tokenizer_has_vocab_and_special_tokens(tokenizer):
    assert len(tokenizer) == 512
    assert tokenizer.pad_token == PAD_TOKEN
    assert tokenizer.eos_token == IM_END
    ids = tokenizer.convert_tokens_to_ids([PAD_TOKEN, IM_START, IM_END])
    assert len(set(ids)) == 3
    assert all(0 <= i < 512 for i in ids)


def test_loads_with_auto_tokenizer(tokenizer_path, tokenizer):
    auto = AutoTokenizer.from_pretrained(tokenizer_path)
    text = "sed -i '12s/a < b/a <= b/' calc.py"
    assert auto.encode(text) == tokenizer.encode(text)


def test_byte_level_round_trip(tokenizer):
    for text in ["python -m pytest -q\n", "E  assert 3 == 4\n\t", "naïve ✓ 漢字 \x01", "  lead"]:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.decode(ids) == text


def test_merges_fit_shell_text(tokenizer):
    # Even 253 merges (vocab 512) should compress familiar commands well below a token per byte.
    text = "python -m pytest -q tests/test_calc.py"
    assert len(tokenizer.encode(text)) < len(text) * 2 // 3


def test_chat_template(tokenizer):
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    without = tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert not without.endswith("assistant\n")


def test_deterministic_and_cached(tmp_path, tokenizer_path, task_texts):
    cfg = TokenizerConfig(cache_dir=str(tmp_path), vocab_size=512)
    path = ensure_tokenizer(cfg, task_texts)
    assert os.path.basename(path) == os.path.basename(tokenizer_path)
    with open(os.path.join(path, "tokenizer.json")) as a, \
            open(os.path.join(tokenizer_path, "tokenizer.json")) as b:
        assert a.read() == b.read()
    mtime = os.path.getmtime(path)
    start_s = time.monotonic()
    assert ensure_tokenizer(cfg, task_texts) == path
    assert time.monotonic() - start_s < 1.0
    assert os.path.getmtime(path) == mtime


def test_vocab_size_changes_cache_key(tmp_path, task_texts):
    small = ensure_tokenizer(TokenizerConfig(cache_dir=str(tmp_path), vocab_size=300), task_texts)
    large = ensure_tokenizer(TokenizerConfig(cache_dir=str(tmp_path), vocab_size=400), task_texts)
    assert small != large
    assert len(load_tokenizer(small)) == 300


@pytest.mark.slow
def test_concurrent_builders_agree(tmp_path):
    # Real processes racing on one cache dir: all get the same complete directory.
    script = (
        "import sys; from configs.schema import TokenizerConfig; "
        "from envs.micro import corpus_texts; from policies.tokenizer import ensure_tokenizer; "
        "print(ensure_tokenizer(TokenizerConfig(cache_dir=sys.argv[1], vocab_size=320), corpus_texts()))"
    )
    repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], cwd=repo_root,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [err for _, err in results]
    paths = {out.strip() for out, _ in results}
    assert len(paths) == 1
    path = paths.pop()
    assert os.listdir(tmp_path / "tokenizers") == [os.path.basename(path)]  # no temp dirs left
    assert len(load_tokenizer(path)) == 320


def test_other_task_texts_train_another_tokenizer(tmp_path, task_texts):
    cfg = TokenizerConfig(cache_dir=str(tmp_path), vocab_size=300)
    assert ensure_tokenizer(cfg, task_texts) != ensure_tokenizer(cfg, task_texts[:50])
