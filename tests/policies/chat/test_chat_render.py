"""Incremental rendering: held ids plus continuation_ids equal the one-piece tokenization."""
from __future__ import annotations

import pytest

from policies.chat.chat_render import NotIncremental, continuation_ids, first_prompt_ids
from policies.chat.chat_tokenizer import load_chat_tokenizer
from policies.chat.qwen3_style_template import QWEN3_STYLE_TEMPLATE
from policies.tokenizer import IM_END
from policies.chat.tito_check import TOOLS, sampled_text

CALL = {"type": "function", "function": {"name": "bash", "arguments": {"command": "grep -n 'def ' calc.py"}}}
HEAD = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "calc.py is wrong."}]
REPLY = {"role": "assistant", "content": "Reading it.", "tool_calls": [CALL]}
RESULTS = [{"role": "tool", "content": "1:def div(a, b):"}, {"role": "tool", "content": "  spaced\n"}]


@pytest.fixture(params=["ours", "transformers"])
def any_tokenizer(request, tokenizer_path, tokenizer):
    return load_chat_tokenizer(tokenizer_path) if request.param == "ours" else tokenizer


def _sampled(tokenizer, message) -> list[int]:
    return tokenizer.encode(sampled_text(message), add_special_tokens=False) + [tokenizer.convert_tokens_to_ids(IM_END)]


def test_first_prompt_is_the_rendering_with_the_generation_prompt(any_tokenizer):
    ids = first_prompt_ids(any_tokenizer, HEAD, TOOLS)
    text = any_tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\nYou fix bugs.\n\n# Tools") and '"name": "bash"' in text
    assert text.endswith("<|im_start|>user\ncalc.py is wrong.<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize("tools", [TOOLS, None])
def test_held_ids_plus_continuation_equal_the_one_piece_tokens(any_tokenizer, tools):
    held = first_prompt_ids(any_tokenizer, HEAD, tools) + _sampled(any_tokenizer, REPLY)
    continuation = continuation_ids(any_tokenizer, HEAD + [REPLY], RESULTS, tools)
    assert held + continuation == first_prompt_ids(any_tokenizer, HEAD + [REPLY] + RESULTS, tools)
    # Only the new messages: the two tool results share one user turn, then the generation prompt.
    assert any_tokenizer.decode(continuation) == (
        "\n<|im_start|>user\n<tool_response>\n1:def div(a, b):\n</tool_response>\n<tool_response>\n  spaced\n\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_continuation_of_plain_turns_is_what_conversation_appends(any_tokenizer):
    history = HEAD + [{"role": "assistant", "content": "```bash\nls\n```"}]
    ids = continuation_ids(any_tokenizer, history, [{"role": "user", "content": "calc.py"}], None)
    assert any_tokenizer.decode(ids) == "\n<|im_start|>user\ncalc.py<|im_end|>\n<|im_start|>assistant\n"


def test_a_template_that_drops_earlier_reasoning_is_not_incremental(tokenizer_path):
    qwen3 = load_chat_tokenizer(tokenizer_path)
    qwen3.chat_template = QWEN3_STYLE_TEMPLATE
    history = HEAD + [{"role": "assistant", "reasoning_content": "Check div.", "content": "It floors."}]
    with pytest.raises(NotIncremental, match=r"from character \d+: alone .*<think>\\nCheck div.* vs followed "
                                             r".*'It floors") as error:
        continuation_ids(qwen3, history, [{"role": "user", "content": "Fix it."}], None)
    assert isinstance(error.value, ValueError)
    # Tool results after a reasoning turn keep it (it is after the last user query): incremental.
    ids = continuation_ids(qwen3, history, RESULTS[:1], None)
    assert qwen3.decode(ids).startswith("\n<|im_start|>user\n<tool_response>")


def test_history_must_end_with_the_policy_s_reply(any_tokenizer):
    with pytest.raises(ValueError, match="must end with the assistant message") as error:
        continuation_ids(any_tokenizer, HEAD, RESULTS, None)
    assert not isinstance(error.value, NotIncremental)


def test_a_template_without_end_of_turn_token_is_not_incremental(tokenizer_path):
    plain = load_chat_tokenizer(tokenizer_path)
    plain.chat_template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    with pytest.raises(NotIncremental, match="without <\\|im_end\\|>"):
        continuation_ids(plain, HEAD + [REPLY], RESULTS, None)
