"""A chat tokenizer for episode actors, built on `tokenizers` and `jinja2` alone.

Episode actors only encode chat turns and decode generations, yet loading AutoTokenizer
imports torch and transformers: about 3 s of CPU and 300 MB per process, paid by every
concurrent episode. ChatTokenizer reads the same tokenizer.json and chat template and
gives the same ids and text as AutoTokenizer for our tokenizer and model directories.
Nothing here may import torch, transformers, or a module of this repo that does.
"""
from __future__ import annotations

import functools
import json
import os
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Tokenizer

# ChatML's turn tokens, as every swerve tokenizer defines them (policies/tokenizer.py builds them).
PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
# The named special tokens transformers hands to chat templates (its SPECIAL_TOKENS_ATTRIBUTES).
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# apply_chat_template options of transformers that this class does not implement; passing one
# must fail loudly rather than reach the template as an unused variable.
UNSUPPORTED_OPTIONS = ("continue_final_message", "sanitize_control_tokens", "return_assistant_tokens_mask",
                       "chat_template", "padding", "truncation", "max_length", "return_tensors", "tokenizer_kwargs")


class _Generation(jinja2.ext.Extension):
    # Some templates mark assistant text with {% generation %}; transformers only tracks its span, the text is unchanged.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # As transformers defines it: jinja's own tojson escapes HTML characters, which would change the prompt.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@functools.lru_cache
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


def _content(token):
    # tokenizer_config.json stores a token as a string or as a serialized AddedToken.
    return token["content"] if isinstance(token, dict) else token


def _message(message) -> dict:
    if not isinstance(message, dict):
        raise TypeError(f"chat messages must be dicts, got {message!r}")
    # As transformers does: templates handle a missing key, but render a None value as "None".
    message = {key: value for key, value in message.items() if value is not None}
    # Templates read reasoning under different names; transformers fills them from each other.
    reasoning = next((message[k] for k in ("reasoning_content", "thinking", "reasoning") if k in message), None)
    if reasoning is not None:
        message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return message


class ChatTokenizer:
    def __init__(self, tokenizer: Tokenizer, chat_template: str | None, special_tokens: dict[str, str]):
        self._tokenizer = tokenizer
        self.chat_template = chat_template
        self.special_tokens = special_tokens
        self.eos_token, self.pad_token = special_tokens.get("eos_token"), special_tokens.get("pad_token")

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        ids = [ids] if isinstance(ids, int) else [int(i) for i in ids]
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def convert_tokens_to_ids(self, token: str) -> int:
        # transformers answers None (no unk token) for an unknown token; a stop id of None fails far away.
        token_id = self._tokenizer.token_to_id(token)
        if token_id is None:
            raise KeyError(f"token {token!r} is not in the vocabulary of this tokenizer")
        return token_id

    def apply_chat_template(self, messages, add_generation_prompt: bool = False, tokenize: bool = True,
                            return_dict: bool = False, **template_kwargs):
        if return_dict:
            raise ValueError("ChatTokenizer.apply_chat_template does not support return_dict=True (a BatchEncoding); "
                             "it returns the list of ids, or the text with tokenize=False")
        unsupported = [name for name in UNSUPPORTED_OPTIONS if template_kwargs.pop(name, None)]
        if unsupported:
            raise ValueError(f"ChatTokenizer.apply_chat_template does not support {', '.join(unsupported)}")
        if self.chat_template is None:
            raise ValueError("this tokenizer has no chat template (no chat_template.jinja, and no chat_template "
                             "in tokenizer_config.json)")
        if not messages:
            raise ValueError("cannot apply the chat template to an empty conversation")
        tools = template_kwargs.pop("tools", None)
        if tools is not None and not all(isinstance(tool, dict) for tool in tools):
            raise TypeError("tools must be JSON schemas (dicts); ChatTokenizer does not convert functions")
        context = {**self.special_tokens, **template_kwargs}  # as in transformers, kwargs win over special tokens
        text = _compile(self.chat_template).render(
            messages=[_message(m) for m in messages], tools=tools, documents=context.pop("documents", None),
            add_generation_prompt=add_generation_prompt, **context)
        return self.encode(text, add_special_tokens=False) if tokenize else text


def load_chat_tokenizer(path: str) -> ChatTokenizer:
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no tokenizer directory at {path!r}; set tokenizer.path to a directory "
                                "holding tokenizer.json")
    tokenizer_file = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(tokenizer_file):
        raise FileNotFoundError(f"{path!r} has no tokenizer.json, which the episode actors' tokenizer needs; "
                                "set tokenizer.path to a directory holding tokenizer.json")
    tokenizer = Tokenizer.from_file(tokenizer_file)
    config = {}
    if os.path.isfile(os.path.join(path, "tokenizer_config.json")):
        with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
    extra = config.get("extra_special_tokens")
    names = SPECIAL_TOKEN_NAMES + tuple(extra) if isinstance(extra, dict) else SPECIAL_TOKEN_NAMES
    specials = {**config, **(extra if isinstance(extra, dict) else {})}
    special_tokens = {name: _content(specials[name]) for name in names if specials.get(name) is not None}
    # transformers adds special tokens named only in the config; their ids would differ without them.
    listed = list(special_tokens.values()) + ([_content(t) for t in extra] if isinstance(extra, list) else [])
    missing = [token for token in listed if tokenizer.token_to_id(token) is None]
    if missing:
        tokenizer.add_tokens([AddedToken(token, special=True) for token in dict.fromkeys(missing)])
    chat_template = config.get("chat_template")
    if os.path.isfile(os.path.join(path, "chat_template.jinja")):
        with open(os.path.join(path, "chat_template.jinja"), encoding="utf-8") as handle:
            chat_template = handle.read()
    elif isinstance(chat_template, list):  # named templates; transformers' default is the one called "default"
        chat_template = {t["name"]: t["template"] for t in chat_template}.get("default")
    return ChatTokenizer(tokenizer, chat_template, special_tokens)
