import json
import os
import subprocess
import sys
import time

import pytest
from transformers import AutoTokenizer

from configs.schema import TokenizerConfig
from policies.chat.chat_tokenizer import load_chat_tokenizer
from policies.corpus import HarnessVocabulary, build_corpus
from policies.tokenizer import (IM_END, IM_START, MAX_PHRASES, PAD_TOKEN, TOOLS_BLOCK_LINES, ensure_tokenizer,
                                harness_phrases, load_tokenizer)


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


@pytest.mark.slow
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
        "from envs.tasks.micro import corpus_texts; from policies.tokenizer import ensure_tokenizer; "
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


@pytest.mark.slow
def test_other_task_texts_train_another_tokenizer(tmp_path, task_texts):
    cfg = TokenizerConfig(cache_dir=str(tmp_path), vocab_size=300)
    assert ensure_tokenizer(cfg, task_texts) != ensure_tokenizer(cfg, task_texts[:50])


# CHAT_TEMPLATE before tool calling: conversations without tools, tool calls, tool results,
# reasoning or developer turns must still render exactly as it did (Conversation appends turns
# by hand, and trained models depend on the bytes).
PLAIN_CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
PLAIN_CONVERSATIONS = [
    [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}],
    [{"role": "system", "content": "a\n\nb "}, {"role": "user", "content": " `ls` <think>x</think>"},
     {"role": "assistant", "content": "```bash\nls\n```", "reasoning_content": None, "tool_calls": []},
     {"role": "system", "content": "late system"}, {"role": "user", "content": "<|im_end|> literal\n"},
     {"role": "assistant", "content": "<tool_call>\n{}\n</tool_call>"}, {"role": "observation", "content": "o"}],
]


@pytest.mark.parametrize("messages", PLAIN_CONVERSATIONS)
@pytest.mark.parametrize("generation_prompt", [True, False])
@pytest.mark.parametrize("tools", [None, []])
def test_plain_conversations_render_as_before_tool_calling(tokenizer_path, tokenizer, messages, generation_prompt,
                                                           tools):
    before = load_chat_tokenizer(tokenizer_path)
    before.chat_template = PLAIN_CHATML
    expected = before.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)
    for renderer in (load_chat_tokenizer(tokenizer_path), tokenizer):
        assert renderer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False,
                                            tools=tools) == expected


BASH = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}


def _render(tokenizer_path, messages, tools=None, generation_prompt=False) -> str:
    return load_chat_tokenizer(tokenizer_path).apply_chat_template(
        messages, tools=tools, add_generation_prompt=generation_prompt, tokenize=False)


def test_tools_join_the_system_turn_in_qwen3_s_format(tokenizer_path):
    text = _render(tokenizer_path, [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], [BASH])
    system, user = text.split("<|im_end|>\n")[:2]
    assert system.startswith("<|im_start|>system\nS\n\n# Tools\n\n")
    assert '<tools>\n{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}\n' \
           '</tools>' in system
    assert system.endswith('<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
    assert user == "<|im_start|>user\nU"
    # Without a system message the tools get a system turn of their own; a developer message is the system's.
    alone = _render(tokenizer_path, [{"role": "user", "content": "U"}], [BASH])
    assert alone.startswith("<|im_start|>system\n# Tools\n\n") and alone.endswith("<|im_start|>user\nU<|im_end|>\n")
    developer = _render(tokenizer_path, [{"role": "developer", "content": "D"}, {"role": "user", "content": "U"}],
                        [BASH])
    assert developer.replace("<|im_start|>system\nD\n\n", "<|im_start|>system\n") == alone
    assert _render(tokenizer_path, [{"role": "developer", "content": "D"}]) == "<|im_start|>system\nD<|im_end|>\n"


def test_tool_calls_and_results_render_as_qwen3_s(tokenizer_path):
    calls = [{"type": "function", "function": {"name": "bash", "arguments": {"command": "ls -a", "n": 2}}},
             {"name": "bash", "arguments": '{"command":"pwd"}'}]
    messages = [{"role": "user", "content": "U"},
                {"role": "assistant", "content": "Looking.", "reasoning_content": "why", "tool_calls": calls},
                {"role": "tool", "content": "a"}, {"role": "tool", "content": "b"},
                {"role": "assistant", "content": None, "tool_calls": calls[:1]}, {"role": "tool", "content": "c"}]
    assert _render(tokenizer_path, messages, generation_prompt=True) == (
        "<|im_start|>user\nU<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nwhy\n</think>\n\nLooking.\n"
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -a", "n": 2}}\n</tool_call>\n'
        '<tool_call>\n{"name": "bash", "arguments": {"command":"pwd"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\na\n</tool_response>\n<tool_response>\nb\n</tool_response><|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls -a", "n": 2}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nc\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_content_that_is_not_text_is_refused(tokenizer_path):
    with pytest.raises(Exception, match="message content must be a string"):
        _render(tokenizer_path, [{"role": "user", "content": [{"type": "text", "text": "U"}]}])


# A harness as envs/harness_texts.py hands one across: its templates' literal parts and a tool.
HARNESS = HarnessVocabulary(
    texts=("You are a careful agent that fixes one bug at a time.\n\nPlease solve this issue: ",
           "\n\nRun the tests before you finish.\nFinish by calling `done` alone.\n", '{\n  "exit_status": '),
    tools=({"type": "function", "function": {"name": "shell", "description": "Run one command",
                                             "parameters": {"type": "object", "properties": {
                                                 "command": {"type": "string"}}, "required": ["command"]}}},))


@pytest.mark.slow
def test_a_harness_s_lines_are_one_token_each_and_every_text_round_trips(tmp_path, task_texts):
    cfg = TokenizerConfig(cache_dir=str(tmp_path), vocab_size=512)
    plain = load_tokenizer(ensure_tokenizer(cfg, task_texts))
    tok = load_tokenizer(ensure_tokenizer(cfg, task_texts, HARNESS))
    phrases = harness_phrases(HARNESS)
    assert "Run the tests before you finish.\n" in phrases and "\n" not in phrases  # blank lines stay BPE
    assert len(tok) == len(plain) + len(phrases)
    for phrase in phrases:
        assert len(tok(phrase)["input_ids"]) == 1, phrase
    # The tool schema as the chat template renders it, and a call's opening, are one token each.
    messages = [{"role": "system", "content": HARNESS.texts[0] + "fix `mean`"}]
    prompt = tok.apply_chat_template(messages, tools=list(HARNESS.tools), tokenize=False)
    assert json.dumps(HARNESS.tools[0]) in prompt and all(line in prompt for line in TOOLS_BLOCK_LINES)
    prompt_ids = tok(prompt)["input_ids"]
    assert tok.convert_tokens_to_ids(json.dumps(HARNESS.tools[0])) in prompt_ids
    assert len(tok(HARNESS.texts[0])["input_ids"]) == 3  # two lines and the blank one between them
    assert len(prompt_ids) < len(plain(prompt)["input_ids"]) - 100
    for text in (prompt, "Run the tests before you finish.\nRun the tests before", "é\x00 " + phrases[0] * 2):
        assert tok.decode(tok(text)["input_ids"]) == text
    reply = '<tool_call>\n{"name": "shell", "arguments": {"command": "ls"}}\n</tool_call>'
    assert tok.convert_tokens_to_ids('<tool_call>\n{"name": "shell", "arguments": ') == tok(reply)["input_ids"][0]


@pytest.mark.slow
def test_another_harness_trains_another_tokenizer_and_the_plain_one_stays(tmp_path, task_texts):
    cfg = TokenizerConfig(cache_dir=str(tmp_path), vocab_size=300)
    plain = ensure_tokenizer(cfg, task_texts)
    with_harness = ensure_tokenizer(cfg, task_texts, HARNESS)
    other = HarnessVocabulary(texts=HARNESS.texts[:2], tools=HARNESS.tools)
    assert len({plain, with_harness, ensure_tokenizer(cfg, task_texts, other)}) == 3
    assert ensure_tokenizer(cfg, task_texts) == plain  # a run without a harness keeps its tokenizer


def test_a_harness_with_too_many_lines_or_no_texts_is_refused(task_texts):
    many = HarnessVocabulary(texts=tuple(f"line number {i} of a very long prompt\n" for i in range(MAX_PHRASES + 1)))
    with pytest.raises(ValueError, match="trim the texts"):
        harness_phrases(many)
    with pytest.raises(ValueError, match="without texts"):
        build_corpus(task_texts, HarnessVocabulary(texts=()))
