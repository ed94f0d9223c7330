"""A multi-turn ChatML conversation kept as token ids, never re-tokenized.

Generated ids are stored exactly as sampled, even when they are not the canonical
tokenization of their text: re-encoding decoded text would change the ids the behavior
log-probs belong to (retokenization drift). Only new text (the prompt, observations) is
ever tokenized, each piece once, on its own.
"""
from __future__ import annotations

from typing import Any, Dict, List, Protocol, Sequence

from policies.chat.chat_tokenizer import IM_END, IM_START


class ChatTokenizerLike(Protocol):
    """What a conversation needs of a tokenizer: a ChatTokenizer (episode actors, free of torch)
    or a transformers tokenizer (evaluation and tests) both fit."""

    def convert_tokens_to_ids(self, token: str) -> int: ...
    def apply_chat_template(self, messages, **kwargs) -> list: ...
    def encode(self, text: str, add_special_tokens: bool = ...) -> list: ...
    def decode(self, ids, skip_special_tokens: bool = ...) -> str: ...

PROMPT_LOGPROB = 0.0
PROMPT_VERSION = -1


def neutralize_special_tokens(text: str) -> str:
    """Command output or task text must never open or close a chat turn: break up `<|...|>`."""
    return text.replace("<|", "<\u200b|")


def neutralize_json(value: Any) -> Any:
    """neutralize_special_tokens on every string of a JSON value (a tool call's arguments), keys included."""
    if isinstance(value, str):
        return neutralize_special_tokens(value)
    if isinstance(value, list):
        return [neutralize_json(item) for item in value]
    if isinstance(value, dict):
        return {neutralize_special_tokens(key): neutralize_json(item) for key, item in value.items()}
    return value


class Conversation:
    def __init__(self, tokenizer: ChatTokenizerLike, system: str, user: str):
        self._tokenizer = tokenizer
        self._im_end_id = tokenizer.convert_tokens_to_ids(IM_END)
        self._messages: List[Dict[str, str]] = [
            {"role": "system", "content": neutralize_special_tokens(system)},
            {"role": "user", "content": neutralize_special_tokens(user)},
        ]
        self.token_ids: List[int] = []
        self.loss_mask: List[int] = []
        self.logprobs: List[float] = []
        self.versions: List[int] = []
        prompt_ids = tokenizer.apply_chat_template(
            self._messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        self._append_context(list(prompt_ids))

    @property
    def num_generated(self) -> int:
        return sum(self.loss_mask)

    def append_generation(
        self, token_ids: Sequence[int], logprobs: Sequence[float], versions: Sequence[int]
    ) -> str:
        """Append one assistant generation (loss mask 1); return its text without <|im_end|>."""
        if not len(token_ids) == len(logprobs) == len(versions):
            raise ValueError(
                f"generation lengths differ: {len(token_ids)} ids, {len(logprobs)} logprobs, "
                f"{len(versions)} versions"
            )
        self.token_ids.extend(int(t) for t in token_ids)
        self.loss_mask.extend([1] * len(token_ids))
        self.logprobs.extend(float(lp) for lp in logprobs)
        self.versions.extend(int(v) for v in versions)
        text_ids = list(token_ids)
        if text_ids and text_ids[-1] == self._im_end_id:
            text_ids = text_ids[:-1]
        text = self._tokenizer.decode(text_ids, skip_special_tokens=False)
        self._messages.append({"role": "assistant", "content": text})
        return text

    def append_observation(self, text: str) -> None:
        """Close the assistant turn and open the next one around a user observation (mask 0)."""
        if not self.token_ids or self.token_ids[-1] != self._im_end_id:
            # The generation hit its length cap; the template still needs the turn closed.
            self._append_context([self._im_end_id])
        text = neutralize_special_tokens(text)
        chunk = f"\n{IM_START}user\n{text}{IM_END}\n{IM_START}assistant\n"
        self._append_context(self._tokenizer.encode(chunk, add_special_tokens=False))
        self._messages.append({"role": "user", "content": text})

    def messages(self) -> List[Dict[str, str]]:
        return [dict(message) for message in self._messages]

    def _append_context(self, ids: List[int]) -> None:
        self.token_ids.extend(ids)
        self.loss_mask.extend([0] * len(ids))
        self.logprobs.extend([PROMPT_LOGPROB] * len(ids))
        self.versions.extend([PROMPT_VERSION] * len(ids))
