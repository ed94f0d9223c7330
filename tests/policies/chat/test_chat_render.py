"""Incremental rendering: held ids plus continuation_ids equal the one-piece tokenization."""
from __future__ import annotations

import pytest

from policies.chat.chat_render import NotIncremental, continuation_after, continuation_ids, first_prompt_ids, render_text
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


def _held_text(tokenizer, history, tools) -> str:
    """What a session's held tokens of `history` stand for: the first prompt's rendering, then the reply as sampled."""
    return render_text(tokenizer, history[:-1], tools, True) + sampled_text(history[-1]) + IM_END


@pytest.mark.parametrize("tools", [TOOLS, None])
def test_the_held_text_path_gives_the_full_render_s_ids(any_tokenizer, tools):
    history = HEAD + [REPLY]
    ids, held = continuation_after(any_tokenizer, _held_text(any_tokenizer, history, tools), history, RESULTS, tools)
    assert ids == continuation_ids(any_tokenizer, history, RESULTS, tools)
    assert held == render_text(any_tokenizer, history + RESULTS, tools, True)  # now the one-piece rendering


def test_a_held_text_the_template_does_not_spell_falls_back_to_the_full_check(any_tokenizer):
    history = HEAD + [REPLY]
    # The model wrote its call as compact JSON: the template re-spells it, so the held text is no prefix.
    compact = render_text(any_tokenizer, HEAD, TOOLS, True) + \
        '<tool_call>\n{"name":"bash","arguments":{"command":"grep -n \'def \' calc.py"}}\n</tool_call>' + IM_END
    assert not render_text(any_tokenizer, history + RESULTS, TOOLS, True).startswith(compact)
    ids, held = continuation_after(any_tokenizer, compact, history, RESULTS, TOOLS)
    assert ids == continuation_ids(any_tokenizer, history, RESULTS, TOOLS)
    assert held == compact + any_tokenizer.decode(ids)  # what the held tokens stand for, their own spelling kept


def test_the_held_text_path_goes_on_where_the_held_text_is_the_one_piece_rendering(tokenizer_path):
    qwen3 = load_chat_tokenizer(tokenizer_path)
    qwen3.chat_template = QWEN3_STYLE_TEMPLATE
    # Rendered last, a reply without reasoning gains an empty <think> block; followed, it has none.
    history = HEAD + [{"role": "assistant", "content": "It floors."}]
    new = [{"role": "user", "content": "Fix it."}]
    with pytest.raises(NotIncremental, match="think"):
        continuation_ids(qwen3, history, new, None)
    # The policy sampled no block, so its held text already is the one-piece rendering: nothing to start over for.
    ids, _ = continuation_after(qwen3, _held_text(qwen3, history, None), history, new, None)
    held = first_prompt_ids(qwen3, HEAD, None) + _sampled(qwen3, history[-1])
    assert held + ids == first_prompt_ids(qwen3, history + new, None)
    # Reasoning the template drops once a user query follows is held nonetheless: the full check refuses it.
    thought = HEAD + [{"role": "assistant", "reasoning_content": "Check div.", "content": "It floors."}]
    with pytest.raises(NotIncremental, match="Check div"):
        continuation_after(qwen3, _held_text(qwen3, thought, None), thought, new, None)
