"""Render only the new messages of a conversation whose earlier tokens are already held.

A session keeps its conversation as token ids: the prompts it rendered and the ids the policy
sampled, never re-encoded. When the client sends more messages, only the rendering that follows
the held tokens is encoded. Two ways to find where that is:

- `continuation_after` (what a session does per request): the session also keeps the text its
  held tokens stand for (the renderings they were encoded from, the sampled ids decoded). When
  the template's one-piece rendering of the whole conversation starts with that text, the held
  tokens are exactly that rendering so far, and the rest is all there is to encode: one render
  per request, never a second one of the history alone.
- `continuation_ids` (the reference, and the fallback when the held text is not a prefix, e.g. a
  reply sampled in another spelling than the template writes it): the history is rendered alone
  too, and the continuation is taken only if the template renders the held history the same way
  whether or not messages follow it; otherwise the held tokens are not what the template would
  give for the whole conversation, and the caller must start over (NotIncremental).

For ChatML templates (every turn closed by <|im_end|>), wherever `continuation_ids` gives ids,
`continuation_after` gives the same ones (tests/policies/chat/test_chat_render.py replays long
sessions both ways). It also goes on where the template renders a final reply differently from a
followed one (a Qwen3-style empty <think> block) yet the held text already is the one-piece
rendering's: the held tokens are then exactly that rendering, and there is nothing to start over for.
"""
from __future__ import annotations

from typing import Optional

from policies.chat.chat_tokenizer import IM_END
from policies.chat.conversation import ChatTokenizerLike

# Characters of rendered text shown on either side of the first difference.
CONTEXT_CHARS = 40


class NotIncremental(ValueError):
    """The chat template renders the held history differently once the new messages follow it."""


def render_text(tokenizer: ChatTokenizerLike, messages: list[dict], tools: Optional[list[dict]],
                generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=generation_prompt,
                                         tokenize=False)


def encode_text(tokenizer: ChatTokenizerLike, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def first_prompt_ids(tokenizer: ChatTokenizerLike, messages: list[dict], tools: Optional[list[dict]]) -> list[int]:
    """The template's rendering of `messages` with the generation prompt, tokenized."""
    return encode_text(tokenizer, render_text(tokenizer, messages, tools, True))


def continuation_ids(tokenizer: ChatTokenizerLike, history: list[dict], new_messages: list[dict],
                     tools: Optional[list[dict]]) -> list[int]:
    """The ids that follow the held tokens of `history` (ending with the sampled end-of-turn
    token of its last, assistant, message) so that they equal the one-piece rendering of
    `history + new_messages` with the generation prompt."""
    _check_history(history)
    followed = render_text(tokenizer, history + new_messages, tools, True)
    return encode_text(tokenizer, followed[_checked_cut(tokenizer, history, followed, tools):])


def continuation_after(tokenizer: ChatTokenizerLike, held_text: str, history: list[dict], new_messages: list[dict],
                       tools: Optional[list[dict]]) -> tuple[list[int], str]:
    """(the ids that follow the held tokens, the text the held tokens then stand for).

    held_text: the text of the held tokens of `history`, ending with the sampled end-of-turn
    token of its last, assistant, message. Raises NotIncremental as continuation_ids does."""
    _check_history(history)
    followed = render_text(tokenizer, history + new_messages, tools, True)
    if held_text.endswith(IM_END) and followed.startswith(held_text):
        cut = len(held_text)  # right after a special token, which BPE never merges with what follows
    else:
        cut = _checked_cut(tokenizer, history, followed, tools)
    return encode_text(tokenizer, followed[cut:]), held_text + followed[cut:]


def _check_history(history: list[dict]) -> None:
    if not history or history[-1].get("role") != "assistant":
        raise ValueError("continuation_ids: the history must end with the assistant message the policy produced")


def _checked_cut(tokenizer: ChatTokenizerLike, history: list[dict], followed: str, tools: Optional[list[dict]]) -> int:
    """Where the held history ends in `followed` (the one-piece rendering with the new messages),
    checked against the history rendered alone."""
    alone = render_text(tokenizer, history, tools, False)
    cut = alone.rfind(IM_END)
    if cut < 0:
        raise NotIncremental(f"the chat template renders the history without {IM_END}, so the sampled "
                             f"end-of-turn token cannot be found in it")
    cut += len(IM_END)
    if followed[:cut] != alone[:cut]:
        at = first_difference(alone[:cut], followed[:cut])
        raise NotIncremental(
            f"the chat template renders the history differently once new messages follow it, from character "
            f"{at}: alone {_around(alone, at)} vs followed {_around(followed, at)}")
    # The rest starts right after a special token, which BPE never merges with what follows.
    return cut


def first_difference(a, b) -> int:
    """Index of the first element where two sequences differ (the shorter one's length if one is a prefix)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _around(text: str, at: int) -> str:
    return repr(text[max(0, at - CONTEXT_CHARS):at]) + " | " + repr(text[at:at + CONTEXT_CHARS])
