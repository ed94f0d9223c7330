"""What `swerve serve`'s OpenAI routes answer besides replies: any body it cannot take is an OpenAI-shaped 4xx
naming the problem, GET /v1/models/<id>, and one log line per request (over real HTTP on 127.0.0.1)."""
from __future__ import annotations

import json
import logging
import re

import openai
import pytest

from tests.policies.server.test_openai_api import MESSAGES, TRAINED_CONTEXT_TOKENS, client, raw, server  # noqa: F401

def test_get_model_by_id_is_the_model_object_or_an_openai_404(client, model_path):
    model = client.models.retrieve(model_path)  # the id holds slashes: the client percent-encodes them
    assert (model.id, model.object, model.max_model_len) == (model_path, "model", TRAINED_CONTEXT_TOKENS)
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("gpt-4o")
    assert missing.value.code == "model_not_found" and "gpt-4o" in missing.value.message


LONE_SURROGATE = "\ud800"
DEEP = 1
for _ in range(100):
    DEEP = [DEEP]


@pytest.mark.parametrize("field, value, param", [
    ("messages", [{"role": "user", "content": LONE_SURROGATE}], "messages[0].content"),
    ("model", "m" + LONE_SURROGATE, "model"),
    ("stop", ["ok", LONE_SURROGATE], "stop[1]"),
    ("tools", [{"type": "function", "function": {"name": LONE_SURROGATE}}], "tools[0].function.name"),
    ("metadata", {LONE_SURROGATE: "x"}, "a key of metadata"),
    ("messages", [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "f", "arguments": json.dumps({"path": LONE_SURROGATE})}}]}],
     "messages[0].tool_calls[0].function.arguments.path"),
    ("tools", [{"type": "function", "function": {"name": "f", "parameters": {"a": DEEP}}}],
     "tools[0].function.parameters.a" + "[0]" * 63),
    ("max_tokens", 1e999, "max_tokens"), ("seed", 2**64, "seed"), ("temperature", -1e308, "temperature"),
    ("messages", {"role": "user"}, "messages"), ("stop", [7], "stop"),
])
def test_a_body_the_server_cannot_take_is_a_400_naming_it(server, field, value, param):
    body = json.dumps({"model": "m", "messages": MESSAGES, "max_tokens": 4, field: value}).encode()  # \ud800 escaped
    status, reply = raw(server, "/v1/chat/completions", body)
    assert status == 400 and reply["error"]["param"] == param and reply["error"]["type"] == "invalid_request_error"
    assert reply["error"]["message"]


@pytest.mark.parametrize("body", [b"[" * 100_000 + b"]" * 100_000, b"{\"model\": 1" + b"0" * 5000 + b"}",
                                  b"{\"model\": \"\xff\"}", '{"\\ud800": 1}'.encode("utf-16")])
def test_a_body_that_cannot_be_parsed_is_a_400(server, body):
    status, reply = raw(server, "/v1/chat/completions", body)
    assert status == 400 and reply["error"]["code"] in ("invalid_json", "invalid_unicode")


def test_a_body_over_the_size_limit_is_an_openai_413(server):
    status, reply = raw(server, "/v1/chat/completions", b" " * (64 * 2**20 + 1))
    assert status == 413 and reply["error"]["code"] == "request_too_large"


def test_each_request_is_one_log_line(server, client, model_path, caplog):
    caplog.set_level(logging.INFO, logger="swerve.requests")
    reply = client.chat.completions.create(model=model_path, messages=MESSAGES, max_tokens=3)
    raw(server, "/v1/chat/completions", json.dumps({"model": "m", "messages": [{"role": "user",
                                                                               "content": LONE_SURROGATE}]}).encode())
    raw(server, "/v1/nothing", b"{}")
    lines = [r.getMessage() for r in caplog.records if r.name == "swerve.requests"]
    assert re.fullmatch(rf"POST /v1/chat/completions 200 prompt_tokens={reply.usage.prompt_tokens} "
                        rf"completion_tokens={reply.usage.completion_tokens} \d+\.\d+s", lines[0])
    assert lines[1].startswith("POST /v1/chat/completions 400 ") and "invalid_unicode: messages[0].content" in lines[1]
    assert lines[2].startswith("POST /v1/nothing 404 ") and "unknown_url" in lines[2] and len(lines) == 3


def test_the_request_log_level_is_a_config_field_and_a_flag():
    from configs.schema import EngineConfig
    from configs.schema.engine import REQUEST_LOG_LEVELS
    from policies.server.options import engine_server_config, parse_args
    from policies.server.wire_http import request_log_level

    assert [request_log_level(name) for name in REQUEST_LOG_LEVELS] == [
        logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, None]
    assert parse_args(["--model-path", "m", "--request-log-level", "off"])[0].request_log_level == "off"
    assert engine_server_config("m", EngineConfig(request_log_level="warning")).request_log_level == "warning"
    with pytest.raises(SystemExit):
        parse_args(["--model-path", "m", "--request-log-level", "loud"])
