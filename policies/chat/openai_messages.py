"""The `messages` of an OpenAI chat request, checked and normalized (policies/chat/openai_wire.py).

A normalized message is `{"role", "content": str | None}` plus, when given, `name`, `tool_calls`
(assistant: `[{"id", "type": "function", "function": {"name", "arguments": <JSON object as a
string>}}]`), `tool_call_id` (tool) and `reasoning_content` (assistant). Text content parts are
joined; any other part is refused. Keys an OpenAI client echoes back when a harness re-sends a reply
as it got it (`message.model_dump()`: `refusal`, `annotations`, `audio`, `function_call`, litellm's
`provider_specific_fields`) are accepted while empty; with a value, or any other key, the message
is refused naming it.

Also here: `check_text`, which refuses (400, naming where) JSON values a tokenizer or a JSON reply cannot
carry: a lone UTF-16 surrogate (valid JSON, `"\\ud800"`, but no Unicode text) and nesting deeper than
MAX_NESTING (a recursion bomb for the template's and the reply's JSON encoders).
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Set

from policies.chat.openai_reply import OpenAIError

ROLES = ("system", "developer", "user", "assistant", "tool")
_ECHOED = {"refusal", "annotations", "audio", "function_call", "provider_specific_fields"}
_KEYS = {"system": {"name"}, "developer": {"name"}, "user": {"name"},
         "assistant": {"name", "tool_calls", "reasoning_content"}, "tool": {"tool_call_id", "name"}}
# Content-part keys besides type/text: a prompt-caching hint (litellm, Anthropic style); the engines'
# prefix cache needs none, and it does not change the reply.
_PART_HINTS = {"cache_control"}


# Deepest nesting of objects and lists accepted in a free-form JSON value (tool parameters, tool-call
# arguments, metadata); real tool schemas nest a few levels.
MAX_NESTING = 64


def _bad(param: str, message: str) -> OpenAIError:
    return OpenAIError(400, message, param=param, code="invalid_value")


def check_text(value: Any, where: str, max_nesting: Optional[int] = MAX_NESTING) -> None:
    """Raise OpenAIError 400 naming the first place in `value` (a parsed JSON value found at `where`) that holds a
    lone surrogate, in a string or an object key, or that nests deeper than `max_nesting` (None: no bound)."""
    if isinstance(value, (dict, list)):
        # Screened at C speed (every request of a session pays this): its JSON text encodes, and has fewer
        # brackets than the bound allows levels. Walked, naming the place, only when the screen cannot tell.
        try:
            text = json.dumps(value, ensure_ascii=False)
            text.encode("utf-8")
        except (UnicodeEncodeError, RecursionError, ValueError, TypeError):
            pass
        else:
            if max_nesting is None or text.count("{") + text.count("[") < max_nesting:
                return
    _walk(value, where, max_nesting)


def check_json_text(text: str, value: Any, where: str) -> None:
    """check_text for `value` parsed from `text`, screened on the text: no escape, no lone surrogate in it, and
    fewer brackets than MAX_NESTING leave nothing to walk."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        if "\\u" not in text and text.count("{") + text.count("[") < MAX_NESTING:
            return
    check_text(value, where)


def _walk(value: Any, where: str, max_nesting: Optional[int]) -> None:
    stack = [(value, where, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            _check_unicode(item, path)
            continue
        if not isinstance(item, (dict, list)):
            continue
        if max_nesting is not None and depth >= max_nesting:
            raise _bad(path, f"{path} nests objects and lists more than {max_nesting} levels deep")
        if isinstance(item, list):
            stack.extend((child, f"{path}[{index}]", depth + 1) for index, child in reversed(list(enumerate(item))))
            continue
        children = []
        for key, child in item.items():
            _check_unicode(key, f"a key of {path}" if path else "a top-level key")
            children.append((child, f"{path}.{key}" if path else key, depth + 1))
        stack.extend(reversed(children))


def _check_unicode(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise OpenAIError(
            400, f"{where} holds a lone UTF-16 surrogate ({ascii(text[error.start])} at character {error.start}), "
            "which is not Unicode text: encode the text as UTF-8 or escape whole surrogate pairs",
            param=where, code="invalid_unicode") from None


def parse_messages(messages: Any) -> List[Dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "messages must be a non-empty list of {role, content} objects")
    call_ids: Set[str] = set()  # tool calls made so far: a tool message must answer one of them
    out = []
    for index, message in enumerate(messages):
        normalized = _message(f"messages[{index}]", message, call_ids)
        call_ids.update(call["id"] for call in normalized.get("tool_calls", ()))
        out.append(normalized)
    return out


def _message(where: str, message: Any, call_ids: Set[str]) -> Dict[str, Any]:
    if not isinstance(message, dict):
        raise _bad(where, f"{where} must be an object with role and content")
    role = message.get("role")
    if role not in ROLES:
        raise _bad(f"{where}.role", f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}")
    for key, value in message.items():
        if key in ("role", "content") or key in _KEYS[role] or (key in _ECHOED and value in (None, [], {})):
            continue
        raise _bad(f"{where}.{key}", f"{where}: {key!r} is not supported on a {role} message")
    out: Dict[str, Any] = {"role": role, "content": _content(where, message.get("content"))}
    for key in ("name", "reasoning_content", "tool_call_id"):
        value = message.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise _bad(f"{where}.{key}", f"{where}.{key} must be a string")
        out[key] = value
    tool_calls = _tool_calls(where, message.get("tool_calls"))
    if tool_calls:
        out["tool_calls"] = tool_calls
    if role == "tool":
        if not out.get("tool_call_id"):
            raise _bad(f"{where}.tool_call_id", f"{where}: a tool message needs the tool_call_id it answers")
        if out["tool_call_id"] not in call_ids:
            raise _bad(f"{where}.tool_call_id", f"{where}.tool_call_id {out['tool_call_id']!r} answers no tool "
                       "call of an earlier assistant message")
    if out["content"] is None and not (role == "assistant" and tool_calls):
        raise _bad(f"{where}.content", f"{where}.content is required (a string or text parts)"
                   + (" unless the message has tool_calls" if role == "assistant" else ""))
    return out


def _content(where: str, content: Any) -> Optional[str]:
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"{where}.content", f"{where}.content must be a string or a list of text parts")
    texts = []
    for index, part in enumerate(content):
        param = f"{where}.content[{index}]"
        if not isinstance(part, dict) or part.get("type") != "text":
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise OpenAIError(400, f"{param}: only text content parts are supported, got {kind!r}",
                              param=param, code="unsupported_value")
        if not isinstance(part.get("text"), str) or set(part) - {"type", "text"} - _PART_HINTS:
            raise _bad(param, f"{param} must be {{\"type\": \"text\", \"text\": <string>}}")
        texts.append(part["text"])
    return "".join(texts)


def _tool_calls(where: str, tool_calls: Any) -> List[Dict[str, Any]]:
    if tool_calls is None:
        return []
    if not isinstance(tool_calls, list):
        raise _bad(f"{where}.tool_calls", f"{where}.tool_calls must be a list")
    out = []
    for index, call in enumerate(tool_calls):
        param = f"{where}.tool_calls[{index}]"
        shape = (f"{param} must be {{\"id\": <string>, \"type\": \"function\", \"function\": "
                 "{\"name\": <string>, \"arguments\": <JSON object as a string>}}")
        # `index` is left on calls by clients that assembled them from a stream.
        if (not isinstance(call, dict) or set(call) - {"id", "type", "function", "index"}
                or not isinstance(call.get("id"), str) or not call["id"] or call.get("type") != "function"):
            raise _bad(param, shape)
        function = call.get("function")
        if (not isinstance(function, dict) or set(function) != {"name", "arguments"}
                or not isinstance(function["name"], str) or not function["name"]
                or not isinstance(function["arguments"], str)):
            raise _bad(f"{param}.function", shape)
        try:
            arguments = json.loads(function["arguments"])
        except (ValueError, RecursionError):
            arguments = None
        if not isinstance(arguments, dict):
            raise _bad(f"{param}.function.arguments", f"{param}.function.arguments must be a JSON object as a "
                       f"string, got {function['arguments'][:80]!r}")
        check_json_text(function["arguments"], arguments, f"{param}.function.arguments")
        out.append({"id": call["id"], "type": "function",
                    "function": {"name": function["name"], "arguments": function["arguments"]}})
    return out
