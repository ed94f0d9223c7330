"""The session gateway on loopback, driven by the real openai client; the episode side is a thread."""
import logging
import os
import threading

import httpx
import openai
import pytest

from actors.episodes.gateway import POLICY_MODEL_ID, Gateway
from policies.chat.openai_wire import OpenAIError, completion_body, context_length_error

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # else litellm fetches its price map at import
import litellm  # noqa: E402


@pytest.fixture
def gateway():
    gateway = Gateway(POLICY_MODEL_ID, 2048, request_deadline_s=5.0)
    gateway.listen_tcp()
    yield gateway
    gateway.close()


def client(gateway, session, **kwargs):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{gateway.port}/sessions/{session.sid}/v1",
                         api_key=session.api_key, max_retries=0, **kwargs)


def answer_each(session, replies):
    """The episode's side: answer requests in order; returns what it saw."""
    seen = []

    def run():
        for status, body in replies:
            pending = session.next_request(10.0)
            assert pending is not None
            seen.append(pending.request)
            pending.answer(status, body)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return seen, thread


def body(content=None, tool_calls=(), finish="stop"):
    return completion_body(model=POLICY_MODEL_ID, content=content, tool_calls=list(tool_calls), finish_reason=finish,
                           prompt_tokens=7, completion_tokens=3, logprobs=None, fingerprint="weights-2")


def test_a_request_reaches_its_session_and_the_answer_comes_back(gateway):
    session = gateway.open()
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    seen, thread = answer_each(session, [(200, body("hi")), (200, body(None, [call]))])
    api = client(gateway, session)
    reply = api.chat.completions.create(model="anything", messages=[{"role": "developer", "content": "be brief"},
                                                                    {"role": "user", "content": "hello"}])
    assert reply.choices[0].message.content == "hi" and reply.usage.prompt_tokens == 7
    stream = api.chat.completions.create(model="anything", messages=[{"role": "user", "content": "go"}], stream=True,
                                         tools=[{"type": "function", "function": {"name": "bash", "parameters": {}}}])
    chunks = list(stream)
    calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or []) if c.choices]
    assert calls and calls[0].function.name == "bash"
    assert "".join(tc.function.arguments or "" for tc in calls) == '{"command": "ls"}'
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    thread.join(5)
    assert [r.messages[-1]["content"] for r in seen] == ["hello", "go"] and seen[0].messages[0]["role"] == "developer"
    assert session.requests == 2 and session.refused == 0
    assert api.models.list().data[0].id == POLICY_MODEL_ID


def test_bad_requests_are_answered_by_the_gateway_and_never_reach_the_episode(gateway):
    session = gateway.open()
    api = client(gateway, session)
    with pytest.raises(openai.BadRequestError) as refused:
        api.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], n=2)
    assert refused.value.body["param"] == "n"
    raw = httpx.post(f"http://127.0.0.1:{gateway.port}/sessions/{session.sid}/v1/chat/completions",
                     content=b"{not json", headers={"Authorization": f"Bearer {session.api_key}"})
    assert raw.status_code == 400 and raw.json()["error"]["message"]
    assert session.inbox.empty() and session.refused == 2 and session.requests == 0


def test_other_sessions_keys_and_routes_are_refused_openai_style(gateway):
    mine, other = gateway.open(), gateway.open()
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"http://127.0.0.1:{gateway.port}/sessions/{other.sid}/v1", api_key=mine.api_key,
                      max_retries=0).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    gone = gateway.open()
    gateway.close_session(gone)
    with pytest.raises(openai.NotFoundError):
        client(gateway, gone).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.NotFoundError):
        client(gateway, mine).completions.create(model="m", prompt="x")
    assert other.inbox.empty()


def test_an_unanswered_request_ends_at_the_deadline_and_a_closed_session_answers_waiters(gateway):
    gateway.request_deadline_s = 0.5
    session = gateway.open()
    with pytest.raises(openai.InternalServerError) as late:
        client(gateway, session).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert late.value.status_code == 504
    gateway.request_deadline_s = 30.0
    waiting = gateway.open()
    errors = []

    def ask():
        try:
            client(gateway, waiting).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        except openai.NotFoundError as error:
            errors.append(error)

    thread = threading.Thread(target=ask)
    thread.start()
    while waiting.inbox.empty():
        thread.join(0.02)
    gateway.close_session(waiting)
    thread.join(10)
    assert len(errors) == 1  # the episode ended: its waiting request is told, not left hanging


def test_the_episodes_errors_reach_litellm_as_its_own_exception_classes(gateway):
    session = gateway.open()
    too_long, refused = context_length_error(5000, 2048), OpenAIError(400, "temperature 0 differs", param="temperature")
    _, thread = answer_each(session, [(too_long.status, too_long.body()), (refused.status, refused.body())])
    ask = dict(model="openai/swerve-policy", api_base=f"http://127.0.0.1:{gateway.port}/sessions/{session.sid}/v1",
               api_key=session.api_key, messages=[{"role": "user", "content": "x"}], num_retries=0)
    with pytest.raises(litellm.ContextWindowExceededError):
        litellm.completion(**ask)
    with pytest.raises(litellm.BadRequestError) as bad:
        litellm.completion(**ask)
    assert not isinstance(bad.value, litellm.ContextWindowExceededError)
    thread.join(5)


def test_a_body_no_tokenizer_could_take_is_a_400_at_the_gateway(gateway):
    session = gateway.open()
    url = f"http://127.0.0.1:{gateway.port}/sessions/{session.sid}/v1/chat/completions"
    auth = {"Authorization": f"Bearer {session.api_key}"}
    for raw, param in [(b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}', "messages[0].content"),
                       (b'{"model": "m", "messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", None)]:
        reply = httpx.post(url, content=raw, headers=auth)
        assert reply.status_code == 400 and reply.json()["error"]["param"] == param
    assert session.inbox.empty() and session.refused == 2


def test_the_model_by_id_and_a_log_line_per_request(gateway, caplog):
    caplog.set_level(logging.DEBUG, logger="swerve.requests")
    session = gateway.open()
    api = client(gateway, session)
    assert api.models.retrieve(POLICY_MODEL_ID).id == POLICY_MODEL_ID
    with pytest.raises(openai.NotFoundError) as missing:
        api.models.retrieve("gpt-4o")
    assert missing.value.code == "model_not_found"
    _, thread = answer_each(session, [(200, body("hi"))])
    api.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    thread.join(5)
    lines = [r.getMessage() for r in caplog.records if r.name == "swerve.requests"]
    sessions = f"/sessions/{session.sid}/v1"
    assert [line.split()[:3] for line in lines] == [["GET", f"{sessions}/models/{POLICY_MODEL_ID}", "200"],
                                                    ["GET", f"{sessions}/models/gpt-4o", "404"],
                                                    ["POST", f"{sessions}/chat/completions", "200"]]
    assert "model_not_found" in lines[1] and "prompt_tokens=7 completion_tokens=3" in lines[2]
