"""ChatSession: token-in, token-out capture of an agent harness's conversation, on the embedded tokenizer."""
import json

import pytest

from policies.chat.chat_render import NotIncremental, continuation_ids, first_prompt_ids
from policies.chat.chat_session import ChatSession, same_history
from policies.chat.chat_tokenizer import IM_END, load_chat_tokenizer
from policies.chat.openai_wire import OpenAIError, parse_chat_request, template_messages
from policies.chat.tito_check import sampled_text
from policies.sample_types import SampleOutput

SYSTEM = {"role": "system", "content": "You are a harness's agent."}
TASK = {"role": "user", "content": "Fix the bug in calc.py"}
BASH = [{"type": "function", "function": {"name": "bash", "description": "run a command",
                                          "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def tok(tokenizer_path):
    return load_chat_tokenizer(tokenizer_path)


def request(messages, **fields):
    return parse_chat_request({"model": "swerve-policy", "messages": messages, **fields})


def sampled(tok, pieces, version=3, stop=True):
    """What an engine returns: ids sampled piece by piece (so not the canonical encoding), with <|im_end|>."""
    ids = [i for piece in pieces for i in tok.encode(piece)]
    if stop:
        ids.append(tok.convert_tokens_to_ids(IM_END))
    return SampleOutput(ids, [-0.5 - i / 100 for i in range(len(ids))], [version] * len(ids), "stop" if stop else "length")


def generated(segment):
    return [t for t, m in zip(segment.token_ids, segment.loss_mask) if m]


def test_extending_requests_keep_sampled_ids_and_render_only_new_messages(tok):
    chat = ChatSession(tok, "split", 4096)
    first = chat.prompt(request([SYSTEM, TASK]))
    assert first == first_prompt_ids(tok, template_messages([SYSTEM, TASK]), None)
    out = sampled(tok, ["I will l", "ook at c", "alc.py"])  # split mid-word: not how the text re-encodes
    assert tok.encode("I will look at calc.py") != out.token_ids[:-1]
    reply = chat.reply(out)
    assert reply.content == "I will look at calc.py" and reply.finish_reason == "stop"
    assert reply.prompt_tokens == len(first) and reply.completion_tokens == len(out.token_ids)
    follow = {"role": "user", "content": "exit code: 0"}
    second = chat.prompt(request([SYSTEM, TASK, {"role": "assistant", "content": reply.content}, follow]))
    assert len(chat.segments) == 1
    assert second[:len(first)] == first and second[len(first):len(first) + len(out.token_ids)] == out.token_ids
    new = second[len(first) + len(out.token_ids):]
    whole = first_prompt_ids(tok, template_messages([SYSTEM, TASK, {"role": "assistant", "content": reply.content},
                                                     follow]), None)
    assert new == whole[len(whole) - len(new):]  # the new message as the template renders it, encoded alone
    segment = chat.current
    assert generated(segment) == out.token_ids
    assert [lp for lp, m in zip(segment.logprobs, segment.loss_mask) if m] == out.logprobs
    assert set(v for v, m in zip(segment.versions, segment.loss_mask) if m) == {3}
    assert len(segment.token_ids) == len(segment.loss_mask) == len(segment.logprobs) == len(segment.versions)


def test_tool_calls_round_trip_with_arguments_reserialised(tok):
    chat = ChatSession(tok, "split", 4096)
    chat.prompt(request([SYSTEM, TASK], tools=BASH))
    out = sampled(tok, ['<tool_call>\n{"name": "bash", "arguments": {"command": "cat calc.py"}}\n</tool_call>'])
    reply = chat.reply(out)
    assert reply.content is None and len(reply.tool_calls) == 1
    call = reply.tool_calls[0]
    assert call["function"]["name"] == "bash" and json.loads(call["function"]["arguments"]) == {"command": "cat calc.py"}
    # The harness echoes the call with its own id and compact JSON, then the tool's result.
    echoed = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_x", "type": "function", "function": {"name": "bash", "arguments": '{"command":"cat calc.py"}'}}]}
    result = {"role": "tool", "tool_call_id": "call_x", "content": "def add(a, b): return a - b"}
    chat.prompt(request([SYSTEM, TASK, echoed, result], tools=BASH))
    assert len(chat.segments) == 1 and generated(chat.current) == out.token_ids


def test_a_rewritten_history_starts_a_new_segment_or_is_refused(tok):
    for rule in ("split", "strict"):
        chat = ChatSession(tok, rule, 4096)
        chat.prompt(request([SYSTEM, TASK]))
        chat.reply(sampled(tok, ["Let me look."]))
        compacted = [SYSTEM, {"role": "user", "content": "Summary so far: looked. Continue."}]
        if rule == "strict":
            with pytest.raises(OpenAIError) as refused:
                chat.prompt(request(compacted))
            assert refused.value.status == 400 and refused.value.param == "messages"
            continue
        prompt = chat.prompt(request(compacted))
        assert len(chat.segments) == 2
        assert prompt == first_prompt_ids(tok, template_messages(compacted), None)
        assert sum(chat.segments[1].loss_mask) == 0


def test_a_changed_reply_or_tools_also_split(tok):
    chat = ChatSession(tok, "split", 4096)
    chat.prompt(request([SYSTEM, TASK]))
    chat.reply(sampled(tok, ["<think>hmm</think>Answer."]))
    edited = {"role": "assistant", "content": "Answer."}  # reasoning dropped by the harness
    chat.prompt(request([SYSTEM, TASK, edited, {"role": "user", "content": "go on"}]))
    assert len(chat.segments) == 2
    chat.reply(sampled(tok, ["ok"]))
    chat.prompt(request([SYSTEM, TASK, edited, {"role": "user", "content": "go on"},
                         {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}], tools=BASH))
    assert len(chat.segments) == 3


def test_a_length_cut_reply_is_closed_before_the_next_turn(tok):
    chat = ChatSession(tok, "split", 4096)
    chat.prompt(request([SYSTEM, TASK]))
    out = sampled(tok, ["an unfinished thou"], stop=False)
    reply = chat.reply(out)
    assert reply.finish_reason == "length"
    im_end = tok.convert_tokens_to_ids(IM_END)
    assert chat.current.token_ids[-1] == im_end and chat.current.loss_mask[-1] == 0


def test_stop_strings_cut_the_reply_and_its_tokens(tok):
    chat = ChatSession(tok, "split", 4096)
    chat.prompt(request([SYSTEM, TASK], stop=["STOP"]))
    out = sampled(tok, ["run ls", " STOP", " and more words"])
    reply = chat.reply(out, ["STOP"])
    assert reply.content == "run ls " and reply.finish_reason == "stop"
    kept = generated(chat.current)
    assert kept == out.token_ids[:len(kept)] and len(kept) < len(out.token_ids)
    assert "STOP" in tok.decode(kept) and "more" not in tok.decode(kept)


def test_a_prompt_past_the_context_is_a_context_window_error(tok):
    chat = ChatSession(tok, "split", 64)
    with pytest.raises(OpenAIError) as error:
        chat.prompt(request([SYSTEM, {"role": "user", "content": "word " * 200}]))
    assert error.value.status == 400 and error.value.code == "context_length_exceeded"
    assert chat.segments == []  # nothing was taken


class Counting:
    """The tokenizer, counting the template's renderings."""

    def __init__(self, tok):
        self._tok, self.renders = tok, 0

    def apply_chat_template(self, *args, **kwargs):
        self.renders += 1
        return self._tok.apply_chat_template(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tok, name)


class FullRender(ChatSession):
    """The reference: each request's continuation from continuation_ids, the history rendered alone and followed."""

    def _continuation(self, new, tools):
        if self.transcript()[-1]["role"] != "assistant":
            return None
        try:
            return continuation_ids(self._tokenizer, template_messages(self.transcript()), new, tools), ""
        except NotIncremental:
            return None


def _call(command, call_id):
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}


COMPACT_CALL, REWRITE = 6, 9  # the reply spelled otherwise than the template writes it; the compaction after


def _script(turns=14):
    """(what the policy samples, what the harness sends next) per turn of a long tool-calling session:
    one or two calls per reply, text around them, a reply spelled otherwise than the template writes
    it (compact JSON), and a compaction that rewrites the history."""
    script = []
    for turn in range(turns):
        if turn == COMPACT_CALL:
            script.append(('<tool_call>\n{"name":"bash","arguments":{"command":"ls"}}\n</tool_call>', "tool"))
        elif turn == REWRITE:
            script.append(("Summarising what I found.", "compact"))
        elif turn % 4 == 3:
            script.append(("Let me check both.\n" + sampled_text({"tool_calls": [
                _call(f"cat f{turn}.py", "a"), _call(f"pytest -q t{turn}.py", "b")]}), "tool"))
        elif turn % 5 == 4:
            script.append(("The bug is in div.", "user"))
        else:
            script.append((sampled_text({"tool_calls": [_call(f"grep -n x f{turn}.py", "a")]}), "tool"))
    return script


def _functions(tool_calls):
    return [call["function"] for call in tool_calls]  # a call's id is drawn afresh per reply


def _next_messages(messages, reply, turn, kind):
    """What a harness sends after `reply`: the reply with its own call ids, then each call's output
    or a user message; or, compacting, a summary in place of the history."""
    if kind == "compact":
        return [SYSTEM, {"role": "user", "content": f"Summary of {turn} turns. Continue."}]
    calls = [{**call, "id": f"h{turn}-{k}"} for k, call in enumerate(reply.tool_calls)]
    echoed = {"role": "assistant", "content": reply.content, **({"tool_calls": calls} if calls else {})}
    outputs = [{"role": "tool", "tool_call_id": call["id"], "content": f"out {turn}.{k}\n"} for k, call in enumerate(calls)]
    return messages + [echoed] + (outputs or [{"role": "user", "content": f"go on {turn}"}])


def test_a_long_session_holds_what_the_full_render_gives_rendering_once_per_request(tok):
    counted, counted_reference = Counting(tok), Counting(tok)
    cached, reference = ChatSession(counted, "split", 8192), FullRender(counted_reference, "split", 8192)
    script, messages, sent = _script(), [SYSTEM, TASK], []
    for turn, (text, kind) in enumerate(script):
        sent.append(messages)
        prompt = cached.prompt(request(messages, tools=BASH))
        assert prompt == reference.prompt(request(messages, tools=BASH))
        if not COMPACT_CALL < turn <= REWRITE:  # replies sampled as the template writes them: the one-piece ids
            assert prompt == first_prompt_ids(tok, template_messages(messages), BASH)
        if turn in (0, REWRITE + 1):
            assert cached.current.oldest_version is None  # nothing sampled in this segment yet
        reply = cached.reply(sampled(tok, [text], version=20 - turn))
        theirs = reference.reply(sampled(tok, [text], version=20 - turn))
        assert (reply.content, _functions(reply.tool_calls)) == (theirs.content, _functions(theirs.tool_calls))
        messages = _next_messages(messages, reply, turn, kind)
    assert len(cached.segments) == len(reference.segments) == 2  # the compaction started the second
    for mine, theirs in zip(cached.segments, reference.segments):
        assert (mine.token_ids, mine.loss_mask, mine.logprobs, mine.versions) == \
               (theirs.token_ids, theirs.loss_mask, theirs.logprobs, theirs.versions)
    # Each segment's oldest sampled version (a request's age priority), kept as its replies came.
    assert [s.oldest_version for s in cached.segments] == [20 - REWRITE, 20 - len(script) + 1]
    kept = cached.segment_messages()
    assert [[same_history([a], [b]) for a, b in zip(mine, theirs)] for mine, theirs in
            zip(kept, reference.segment_messages())] == [[True] * len(mine) for mine in kept]
    assert kept[-1] == cached.transcript()
    assert kept[0] == sent[REWRITE] + [{"role": "assistant", "content": "Summarising what I found."}]
    assert kept[1][:2] == sent[REWRITE + 1] and kept[1][-1]["tool_calls"][0]["function"]["name"] == "bash"
    # One rendering per request. After the compact reply the held text is no prefix of the rendering,
    # so the rest of that segment also renders the history alone, as the reference does every time.
    assert counted.renders == len(script) + (REWRITE - COMPACT_CALL)
    assert counted_reference.renders == 2 * len(script) - 2  # the first request of each segment renders once
