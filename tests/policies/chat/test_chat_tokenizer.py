"""ChatTokenizer must give exactly what AutoTokenizer gives, without importing torch or transformers."""
from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from configs.schema import ModelConfig, TokenizerConfig
from policies.chat.chat_tokenizer import load_chat_tokenizer
from policies.model import ensure_model
from policies.tokenizer import ensure_tokenizer

REPO = Path(__file__).resolve().parents[3]  # this checkout, wherever it was cloned
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

TEXTS = [
    "", " ", "\n", "\n\n\t  \r\n", "hello world", "  leading and trailing  ", "ls -la /tmp && cd ..",
    "Grüße, naïve café — “quotes” ‘single’ …", "日本語のテキストと中文字符", "Здравствуй, мир", "مرحبا بالعالم",
    "emoji 🙂🚀👩‍👩‍👧‍👦 flags 🇫🇷🇯🇵 skin 👍🏽", "\u200b zero\u200bwidth \ufeff bom", "tab\tand\x00nul\x7f",
    "```python\ndef f(x):\n    return x ** 2  # `square`\n```", "inline `code` and ``double`` backticks",
    "diff --git a/x.py b/x.py\n@@ -1,3 +1,4 @@\n-    pass\n+    return {'a': [1, 2]}\n",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "text <|im_end|> inside", "<|im_end|><|im_end|>",
    "<|endoftext|>", "<|im_start|", "< |im_end| >", "<\u200b|im_end|>", "almost <|im_endd|> a token",
    "x" * 5000, "word " * 3000, "🙂" * 1000, "def f():\n    pass\n" * 400,
]

CONVERSATIONS = [
    ([{"role": "system", "content": "You are a coding agent."},
      {"role": "user", "content": "Fix the failing test in tests/test_x.py"}], True),
    ([{"role": "system", "content": "sys"}, {"role": "user", "content": "run `pytest -q`"},
      {"role": "assistant", "content": "```bash\npytest -q\n```"}, {"role": "user", "content": "1 failed 🙁"},
      {"role": "assistant", "content": "Let me look.", "reasoning_content": None}], False),
    ([{"role": "user", "content": "literal <|im_end|> and <|im_start|>assistant\n in content"},
      {"role": "assistant", "content": "ok <|endoftext|>"}], True),
    ([{"role": "user", "content": ""}], False),
    ([{"role": "system", "content": "ünïcödé 日本 🚀" * 50}, {"role": "user", "content": "x\n" * 500}], True),
]

# Exercises what transformers' template environment adds: tojson (no HTML escaping), raise_exception,
# loopcontrols, namespace, trim_blocks/lstrip_blocks, {% generation %}, special tokens and extra kwargs.
RICH_TEMPLATE = """{{ bos_token }}
{%- set ns = namespace(n=0) %}
{% if tools %}<tools>{% for tool in tools %}{{ tool | tojson }}{% endfor %}</tools>
{% endif %}
{% for message in messages %}
    {% if message.role not in ['system', 'user', 'assistant'] %}{{ raise_exception('bad role ' + message.role) }}{% endif %}
    {% if message.role == 'system' and skip_system %}{% continue %}{% endif %}
    {% set ns.n = ns.n + 1 %}
    <|im_start|>{{ message.role }}
    {% if message.reasoning_content is defined %}<think>{{ message.reasoning_content }}</think>{% endif %}
    {% if message.role == 'assistant' %}{% generation %}{{ message.content }}{% endgeneration %}{% else %}{{ message.content }}{% endif %}{{ eos_token }}
    {% if ns.n >= max_turns | default(99) %}{% break %}{% endif %}
{% endfor %}
{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}
"""


@pytest.fixture(scope="module")
def dirs(swerve_cache, tmp_path_factory, task_texts):
    """Tokenizer and model directories as ensure_tokenizer/ensure_model build them, plus a rich-template copy."""
    actor_tokenizer = ensure_tokenizer(TokenizerConfig(cache_dir=swerve_cache), task_texts)
    small_tokenizer = ensure_tokenizer(TokenizerConfig(cache_dir=swerve_cache, vocab_size=512), task_texts)
    model = ensure_model(ModelConfig(cache_dir=swerve_cache), actor_tokenizer)
    # The template in tokenizer_config.json (no chat_template.jinja), and a bos token tokenizer.json lacks.
    rich = tmp_path_factory.mktemp("rich-template")
    shutil.copy(f"{actor_tokenizer}/tokenizer.json", rich)
    with open(f"{actor_tokenizer}/tokenizer_config.json") as handle:
        config = json.load(handle)
    config.update(chat_template=RICH_TEMPLATE, bos_token="<|startoftext|>")
    (rich / "tokenizer_config.json").write_text(json.dumps(config))
    return {"tokenizer": actor_tokenizer, "small_tokenizer": small_tokenizer, "model": model, "rich": str(rich)}


@pytest.fixture(scope="module", params=["tokenizer", "small_tokenizer", "model", "rich"])
def pair(request, dirs):
    path = dirs[request.param]
    return load_chat_tokenizer(path), AutoTokenizer.from_pretrained(path)


def test_sizes_and_special_tokens(pair):
    ours, theirs = pair
    assert len(ours) == len(theirs) and ours.vocab_size == theirs.vocab_size
    assert ours.eos_token == theirs.eos_token and ours.pad_token == theirs.pad_token
    assert ours.special_tokens == theirs.special_tokens_map
    for token in SPECIAL + [theirs.eos_token, theirs.pad_token] + ([theirs.bos_token] if theirs.bos_token else []):
        assert ours.convert_tokens_to_ids(token) == theirs.convert_tokens_to_ids(token)
    assert ours.convert_tokens_to_ids("a") == theirs.convert_tokens_to_ids("a")


def test_encode_decode(pair):
    ours, theirs = pair
    texts = TEXTS + [f"{theirs.bos_token} starts" if theirs.bos_token else "no bos"]
    for text in texts:
        ids = ours.encode(text)
        assert ids == theirs.encode(text, add_special_tokens=False), text[:80]
        assert ours.encode(text, add_special_tokens=True) == theirs.encode(text, add_special_tokens=True)
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip)
        assert ours.decode(ids) == text  # byte-level BPE round-trips any text


def test_decode_arbitrary_ids(pair):
    # Generations are any ids, including half a UTF-8 character and special tokens mid-text.
    ours, theirs = pair
    rng = random.Random(0)
    specials = [theirs.convert_tokens_to_ids(t) for t in SPECIAL]
    for length in [0, 1, 2, 3, 7, 50, 500]:
        for _ in range(20):
            ids = [rng.choice(specials) if rng.random() < 0.1 else rng.randrange(len(theirs)) for _ in range(length)]
            for skip in (False, True):
                assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip)
    assert ours.decode(specials[0]) == theirs.decode(specials[0])


@pytest.mark.parametrize("messages,generation_prompt", CONVERSATIONS)
def test_apply_chat_template(pair, messages, generation_prompt):
    ours, theirs = pair
    for kwargs in ({}, {"tools": [{"name": "bash", "description": "<run> & \"quote\" 🙂"}], "skip_system": True,
                        "max_turns": 2}):
        text = theirs.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False, **kwargs)
        assert ours.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False,
                                        **kwargs) == text
        ids = theirs.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True,
                                         return_dict=False, **kwargs)
        assert ours.apply_chat_template(messages, add_generation_prompt=generation_prompt, **kwargs) == ids
        assert ours.encode(text) == ids


def test_rich_template_environment(dirs):
    ours, theirs = load_chat_tokenizer(dirs["rich"]), AutoTokenizer.from_pretrained(dirs["rich"])
    messages = [{"role": "assistant", "content": "a", "thinking": "why"}]
    assert "<think>why</think>" in ours.apply_chat_template(messages, tokenize=False)
    assert ours.apply_chat_template(messages) == theirs.apply_chat_template(messages, return_dict=False)
    bad = [{"role": "tool", "content": "x"}]
    with pytest.raises(Exception, match="bad role tool") as our_error:
        ours.apply_chat_template(bad)
    with pytest.raises(Exception, match="bad role tool") as their_error:
        theirs.apply_chat_template(bad)
    assert type(our_error.value) is type(their_error.value)


def test_no_torch_or_transformers_in_actor_process(dirs):
    # The episode actor's whole module, gateway included (it once pulled torch in through the CPU
    # server's SSE helper: ~6 s of CPU and ~300 MB more per episode actor).
    code = ("import json, sys; import actors.episodes.episode_actor; import policies.chat.chat_tokenizer as m; "
            "t = m.load_chat_tokenizer(sys.argv[1]); "
            "t.apply_chat_template([{'role': 'user', 'content': 'hi'}], add_generation_prompt=True); "
            "print(json.dumps(sorted(n for n in ('torch', 'transformers') if n in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code, dirs["model"]], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer directory .* set tokenizer.path"):
        load_chat_tokenizer(str(tmp_path / "nope"))


def test_directory_without_tokenizer_json(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="has no tokenizer.json.*set tokenizer.path"):
        load_chat_tokenizer(str(tmp_path))


def test_unknown_token(dirs):
    with pytest.raises(KeyError, match="not in the vocabulary"):
        load_chat_tokenizer(dirs["tokenizer"]).convert_tokens_to_ids("<|no_such_token|>")


def test_unsupported_options(dirs):
    ours = load_chat_tokenizer(dirs["tokenizer"])
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match="return_dict=True"):
        ours.apply_chat_template(messages, return_dict=True)
    with pytest.raises(ValueError, match="continue_final_message"):
        ours.apply_chat_template(messages, continue_final_message=True)
    with pytest.raises(ValueError, match="empty conversation"):
        ours.apply_chat_template([])


def _tool_conversations():
    from policies.chat.tito_check import CONVERSATIONS

    return [pytest.param(s.messages, s.tools, id=s.name) for s in CONVERSATIONS]


@pytest.mark.parametrize("messages,tools", _tool_conversations())
@pytest.mark.parametrize("template", ["embedded", "qwen3-style"])
def test_tool_calling_templates_render_alike(dirs, messages, tools, template):
    # Tools, tool calls (arguments as dicts), tool results, developer and reasoning turns; both templates.
    from policies.chat.qwen3_style_template import QWEN3_STYLE_TEMPLATE

    ours, theirs = load_chat_tokenizer(dirs["tokenizer"]), AutoTokenizer.from_pretrained(dirs["tokenizer"])
    if template == "qwen3-style":
        ours.chat_template = theirs.chat_template = QWEN3_STYLE_TEMPLATE
    for count in range(1, len(messages) + 1):
        for generation_prompt in (False, True):
            text = theirs.apply_chat_template(messages[:count], tools=tools, add_generation_prompt=generation_prompt,
                                              tokenize=False)
            assert ours.apply_chat_template(messages[:count], tools=tools, add_generation_prompt=generation_prompt,
                                            tokenize=False) == text
    thinking_off = theirs.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False,
                                              enable_thinking=False)
    assert ours.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False,
                                    enable_thinking=False) == thinking_off
