"""`swerve tito-check`: does a chat template render conversations incrementally exactly as in one piece?

Each scripted conversation is replayed the way a token-exact session holds it: the first prompt
rendered and encoded, then per assistant turn the ids a model would have sampled (its text
encoded on its own, then the end-of-turn token), then only the following messages rendered
(policies.chat.chat_render.continuation_ids). The held ids must equal the tokenization of the
whole conversation rendered in one piece; where they cannot, the first differing token is named.
The check is the strict one: a session (which also keeps the text of its held tokens,
continuation_after) goes on wherever it does, with the same ids: where a conversation passes
here, a session holding it would not start over either.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Optional

from policies.chat.chat_render import NotIncremental, continuation_ids, first_difference, first_prompt_ids, render_text
from policies.chat.chat_tokenizer import IM_END, ChatTokenizer, load_chat_tokenizer
from policies.chat.conversation import ChatTokenizerLike
from policies.chat.qwen3_style_template import QWEN3_STYLE_TEMPLATE

# --chat-template's name for the built-in Qwen3-like template.
QWEN3_STYLE = "qwen3-style"
# Tokens shown on either side of the first differing one.
CONTEXT_TOKENS = 8


class SetupError(ValueError):
    """The tokenizer directory or template cannot be checked (exit status 2)."""


@dataclass(frozen=True)
class Scripted:
    name: str
    messages: list[dict]
    tools: Optional[list[dict]] = None


def _tool(name: str, description: str, argument: str) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": {argument: {"type": "string"}}, "required": [argument]}}}


def _call(name: str, **arguments) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


TOOLS = [_tool("bash", "Run a shell command in the repository; returns its output.", "command"),
         _tool("read_file", "Return a file's text.", "path")]

CONVERSATIONS = [
    Scripted("multi-turn text", [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Why does `pytest -q` fail?"},
        {"role": "assistant", "content": "Let me run it.\n```bash\npytest -q\n```"},
        {"role": "user", "content": "E   assert add(2, 2) == 5\n1 failed"},
        {"role": "assistant", "content": "The test expects 5; 2 + 2 is 4. Fix the test."},
        {"role": "user", "content": "Done, thanks. Anything else?"}]),
    Scripted("tool calls", [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "calc.py divides wrongly."},
        {"role": "assistant", "content": "Looking at the file.", "tool_calls": [_call("read_file", path="calc.py")]},
        {"role": "tool", "content": "def div(a, b):\n    return a // b\n"},
        {"role": "assistant", "content": "", "tool_calls": [
            _call("bash", command="sed -i 's#a // b#a / b#' calc.py"), _call("bash", command="pytest -q")]},
        {"role": "tool", "content": ""},
        {"role": "tool", "content": "3 passed in 0.02s"},
        {"role": "assistant", "content": "Fixed: `div` now uses true division."},
        {"role": "user", "content": "Great."}], TOOLS),
    Scripted("tools with developer instructions", [
        {"role": "developer", "content": "Answer with tool calls only."},
        {"role": "user", "content": "List the repository."},
        {"role": "assistant", "content": "", "tool_calls": [_call("bash", command="ls -a")]},
        {"role": "tool", "content": ".\n..\ncalc.py\ntests"}], TOOLS),
    Scripted("system and developer", [
        {"role": "system", "content": "You are terse."},
        {"role": "developer", "content": "Reply in English."},
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "Hi."},
        {"role": "developer", "content": "Now reply in French."},
        {"role": "user", "content": "Say hi again."}]),
    Scripted("reasoning", [
        {"role": "system", "content": "Think before you act."},
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "reasoning_content": "91 = 7 * 13.", "content": "No: 91 = 7 x 13."},
        {"role": "user", "content": "Check it with Python."},
        {"role": "assistant", "reasoning_content": "Run a one-liner.",
         "content": "", "tool_calls": [_call("bash", command="python3 -c 'print(7 * 13)'")]},
        {"role": "tool", "content": "91"}], TOOLS),
    Scripted("reasoning across tool calls", [
        {"role": "user", "content": "How many lines does calc.py have?"},
        {"role": "assistant", "reasoning_content": "Count them with wc.",
         "content": "", "tool_calls": [_call("bash", command="wc -l calc.py")]},
        {"role": "tool", "content": "2 calc.py"},
        {"role": "assistant", "reasoning_content": "Double-check by reading it.",
         "content": "", "tool_calls": [_call("read_file", path="calc.py")]},
        {"role": "tool", "content": "def div(a, b):\n    return a / b\n"}], TOOLS),
]


def sampled_text(message: dict) -> str:
    """What a model would have generated for an assistant message, before its end-of-turn token:
    reasoning in a <think> block, the content, then each tool call as compact one-line JSON."""
    reasoning = message.get("reasoning_content") or ""
    content = message.get("content") or ""
    calls = [call.get("function", call) for call in message.get("tool_calls") or []]
    blocks = [f'<tool_call>\n{{"name": {json.dumps(call["name"], ensure_ascii=False)}, "arguments": '
              f'{_arguments_json(call["arguments"])}}}\n</tool_call>' for call in calls]
    text = f"<think>\n{reasoning}\n</think>\n\n" if reasoning else ""
    return text + content + ("\n" if content and blocks else "") + "\n".join(blocks)


def _arguments_json(arguments) -> str:
    # A string is the model's own JSON text, kept as written.
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def replay(tokenizer: ChatTokenizerLike, scripted: Scripted) -> dict:
    """One conversation's result: {"name", "ok", "tokens"}, and where it is not incremental
    {"stage", "token_index", "reason", "detail", "sides": {side name: context around the token}}."""
    messages, tools = scripted.messages, scripted.tools
    turns = [i for i, message in enumerate(messages) if message["role"] == "assistant"]
    if not turns or messages[-1]["role"] == "assistant" or any(b == a + 1 for a, b in zip(turns, turns[1:])):
        raise ValueError(f"conversation {scripted.name!r} must hold assistant turns, each followed by other "
                         f"messages, and end with a message that is not the assistant's")
    im_end_id = tokenizer.convert_tokens_to_ids(IM_END)
    held = first_prompt_ids(tokenizer, messages[:turns[0]], tools)
    for turn, end in zip(turns, turns[1:] + [len(messages)]):
        held += list(tokenizer.encode(sampled_text(messages[turn]), add_special_tokens=False)) + [im_end_id]
        history, new = messages[:turn + 1], messages[turn + 1:end]
        try:
            held += continuation_ids(tokenizer, history, new, tools)
        except NotIncremental as error:
            alone = tokenizer.encode(render_text(tokenizer, history, tools, False), add_special_tokens=False)
            followed = first_prompt_ids(tokenizer, history + new, tools)
            return _failure(tokenizer, scripted.name, f"after message {turn}",
                            "the template renders the history differently once the next messages follow it",
                            {"history alone": list(alone), "history followed": followed}, detail=str(error))
    one_piece = first_prompt_ids(tokenizer, messages, tools)
    if held != one_piece:
        return _failure(tokenizer, scripted.name, "whole conversation",
                        "the held ids (sampled ids and incremental renderings) differ from the one-piece rendering",
                        {"held": held, "one piece": one_piece})
    return {"name": scripted.name, "ok": True, "tokens": len(held)}


def _failure(tokenizer, name: str, stage: str, reason: str, sides: dict[str, list[int]], detail: str = "") -> dict:
    index = first_difference(*sides.values())
    return {"name": name, "ok": False, "stage": stage, "token_index": index, "reason": reason, "detail": detail,
            "sides": {side: _context(tokenizer, ids, index) for side, ids in sides.items()}}


def _context(tokenizer, ids: list[int], index: int) -> dict:
    return {"before": tokenizer.decode(ids[max(0, index - CONTEXT_TOKENS):index]),
            "token": tokenizer.decode(ids[index:index + 1]),
            "token_id": ids[index] if index < len(ids) else None,
            "after": tokenizer.decode(ids[index + 1:index + 1 + CONTEXT_TOKENS])}


def check(tokenizer: ChatTokenizerLike, conversations: list[Scripted] = CONVERSATIONS) -> list[dict]:
    return [replay(tokenizer, scripted) for scripted in conversations]


def load(tokenizer_dir: str, chat_template: str = "") -> ChatTokenizer:
    """The directory's tokenizer, its chat template replaced by `chat_template` when given
    (QWEN3_STYLE, or a file holding a jinja template)."""
    fix = "pass --tokenizer a directory holding tokenizer.json and a chat template"
    if not os.path.isdir(tokenizer_dir):
        raise SetupError(f"no directory at {tokenizer_dir!r}; {fix}")
    if not os.path.isfile(os.path.join(tokenizer_dir, "tokenizer.json")):
        raise SetupError(f"{tokenizer_dir!r} has no tokenizer.json; {fix}")
    tokenizer = load_chat_tokenizer(tokenizer_dir)
    if chat_template == QWEN3_STYLE:
        tokenizer.chat_template = QWEN3_STYLE_TEMPLATE
    elif chat_template:
        if not os.path.isfile(chat_template):
            raise SetupError(f"--chat-template: no file at {chat_template!r}; pass a jinja file or {QWEN3_STYLE}")
        with open(chat_template, encoding="utf-8") as handle:
            tokenizer.chat_template = handle.read()
    if not tokenizer.chat_template:
        raise SetupError(f"{tokenizer_dir!r} has no chat template (chat_template.jinja or chat_template in "
                         f"tokenizer_config.json); {fix}, or pass --chat-template FILE")
    if len(tokenizer.encode(IM_END)) != 1:
        # Sessions cut the rendering right after it, which is exact only if BPE never merges across it.
        raise SetupError(f"{tokenizer_dir!r}: {IM_END} is not a special token of this tokenizer; tito-check checks "
                         f"ChatML templates, whose turns end with it")
    return tokenizer


def format_report(results: list[dict]) -> str:
    width = max(len(result["name"]) for result in results)
    lines = []
    for result in results:
        if result["ok"]:
            lines.append(f"  {result['name']:<{width}}  OK ({result['tokens']} tokens)")
            continue
        lines.append(f"  {result['name']:<{width}}  NOT INCREMENTAL ({result['stage']}) at token "
                     f"{result['token_index']}: {result['reason']}")
        for side, around in result["sides"].items():
            lines.append(f"      {side + ':':<18} {around['before']!r} [{around['token']!r}] {around['after']!r}")
    passed = sum(result["ok"] for result in results)
    lines.append(f"{passed} of {len(results)} conversations render incrementally exactly as in one piece")
    return "\n".join(lines)


def main(tokenizer_dir: str, chat_template: str = "", as_json: bool = False) -> int:
    """Print the check's results; 0 when every conversation is incremental, 1 otherwise, 2 when
    the directory cannot be checked."""
    try:
        tokenizer = load(tokenizer_dir, chat_template)
    except SetupError as error:
        print(f"swerve tito-check: {error}", file=sys.stderr)
        return 2
    results = check(tokenizer)
    incremental = all(result["ok"] for result in results)
    template = chat_template or "the directory's"
    if as_json:
        print(json.dumps({"tokenizer": tokenizer_dir, "chat_template": template, "incremental": incremental,
                          "conversations": results}, indent=1))
    else:
        print(f"tito-check {tokenizer_dir} (chat template: {template})\n{format_report(results)}")
    return 0 if incremental else 1
