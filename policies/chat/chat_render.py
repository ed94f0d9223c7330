"""Render only the new messages of a conversation whose earlier tokens are already held.

A session keeps its conversation as token ids: the prompts it rendered and the ids the policy
sampled, never re-encoded. When the client sends more messages, only their rendering is
encoded, and only if the chat template renders the held history the same way whether or not
messages follow it; otherwise the held tokens are not what the template would give for the
whole conversation, and the caller must start over (NotIncremental).
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


def first_prompt_ids(tokenizer: ChatTokenizerLike, messages: list[dict], tools: Optional[list[dict]]) -> list[int]:
    """The template's rendering of `messages` with the generation prompt, tokenized."""
    return list(tokenizer.encode(render_text(tokenizer, messages, tools, True), add_special_tokens=False))


def continuation_ids(tokenizer: ChatTokenizerLike, history: list[dict], new_messages: list[dict],
                     tools: Optional[list[dict]]) -> list[int]:
    """The ids that follow the held tokens of `history` (ending with the sampled end-of-turn
    token of its last, assistant, message) so that they equal the one-piece rendering of
    `history + new_messages` with the generation prompt."""
    if not history or history[-1].get("role") != "assistant":
        raise ValueError("continuation_ids: the history must end with the assistant message the policy produced")
    alone = render_text(tokenizer, history, tools, False)
    followed = render_text(tokenizer, history + new_messages, tools, True)
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
    return list(tokenizer.encode(followed[cut:], add_special_tokens=False))


def first_difference(a, b) -> int:
    """Index of the first element where two sequences differ (the shorter one's length if one is a prefix)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _around(text: str, at: int) -> str:
    return repr(text[max(0, at - CONTEXT_CHARS):at]) + " | " + repr(text[at:at + CONTEXT_CHARS])
