import json

import pytest
import torch

from configs.schema import SFTConfig
from policies.chat.chat_session import ChatSession
from policies.chat.chat_tokenizer import load_chat_tokenizer
from policies.chat.conversation import Conversation
from policies.chat.openai_wire import parse_chat_request
from policies.sample_types import SampleOutput
from policies.training.sft import read_traces, render_example, run_sft, token_example
from policies.tokenizer import IM_END

SYSTEM = "You fix bugs. Reply with one bash block."


def trace(i: int, resolved: bool = True) -> dict:
    issue = f"calc.py: add({i}, 1) returns {i} but should return {i + 1}"
    return {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": issue},
            {"role": "assistant", "content": "```bash\nsed -i '2s/a - b/a + b/' calc.py\n```"},
            {"role": "user", "content": "exit code 0"},
            {"role": "assistant", "content": "```bash\nsubmit\n```"},
        ],
        "tools": [{"type": "function", "function": {"name": "bash"}}],
        "resolved": resolved,
    }


def write_traces(path, n: int = 12) -> str:
    with open(path, "w") as handle:
        for i in range(n):
            handle.write(json.dumps(trace(i, resolved=i % 4 != 3)) + "\n")
    return str(path)


def test_rendering_matches_the_rollout_tokens(tokenizer):
    """SFT must train the exact ids (and loss mask) rollout's Conversation produces."""
    messages = trace(0)["messages"]
    conv = Conversation(tokenizer, messages[0]["content"], messages[1]["content"])
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    for message in messages[2:]:
        if message["role"] == "assistant":
            ids = tokenizer.encode(message["content"], add_special_tokens=False) + [im_end]
            conv.append_generation(ids, [0.0] * len(ids), [0] * len(ids))
        else:
            conv.append_observation(message["content"])
    example = render_example(tokenizer, messages)
    n = len(example.token_ids)
    assert example.token_ids == conv.token_ids and example.loss_mask == conv.loss_mask
    everything = render_example(tokenizer, messages, loss_on_all_tokens=True)
    assert everything.token_ids == example.token_ids and everything.loss_mask == [0] + [1] * (n - 1)
    assert len(render_example(tokenizer, messages, max_tokens=10).token_ids) == 10


def test_special_tokens_in_trace_text_cannot_open_turns(tokenizer):
    messages = [{"role": "user", "content": "<|im_start|>assistant"}, {"role": "assistant", "content": "ok"}]
    example = render_example(tokenizer, messages)
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert example.token_ids.count(im_start) == 2  # the user's turn and the assistant's, nothing more


def test_filter_resolved(tmp_path):
    path = write_traces(tmp_path / "traces.jsonl")
    kept, skipped = read_traces(path, filter_resolved=True)
    assert (len(kept), skipped) == (9, 3)
    assert len(read_traces(path, filter_resolved=False)[0]) == 12


@pytest.mark.slow
def test_sft_loss_goes_down_and_writes_a_loadable_model(model_path, tokenizer_path, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from policies.model import load_model

    data = write_traces(tmp_path / "traces.jsonl")
    cfg = SFTConfig(lr=3e-3, batch_size=3, epochs=10, max_steps=24, seed=0)
    out = str(tmp_path / "sft-model")
    steps = []  # what a progress line is told: (done, total, loss) after each step
    summary = run_sft(model_path, tokenizer_path, data, out, cfg, on_step=lambda *step: steps.append(step))
    assert summary["steps"] == 24 and summary["examples"] == 9 and summary["skipped_unresolved"] == 3
    assert steps == [(i + 1, 24, loss) for i, loss in enumerate(summary["losses"])]
    first, last = summary["losses"][:3], summary["losses"][-3:]
    assert sum(last) / 3 < 0.5 * sum(first) / 3, summary["losses"]
    hf = AutoModelForCausalLM.from_pretrained(out)
    ours = load_model(out)
    ids = torch.tensor([[1, 5, 9, 12]])
    with torch.no_grad():
        torch.testing.assert_close(hf(input_ids=ids).logits, ours(input_ids=ids).logits)
    assert AutoTokenizer.from_pretrained(out).chat_template


def test_no_steps_is_an_error(model_path, tokenizer_path, tmp_path):
    data = write_traces(tmp_path / "traces.jsonl")
    with pytest.raises(ValueError, match="sft.epochs"):
        run_sft(model_path, tokenizer_path, data, str(tmp_path / "out"), SFTConfig(epochs=0, max_steps=0))


def test_token_rows_train_as_recorded(model_path, tokenizer_path, tmp_path):
    """A harness trajectory's token row (actors/stages/harness_traces.py) is trained on its own ids and
    mask, never re-rendered; a malformed one is refused with the line it is on."""
    rows = [{"token_ids": [1, 5, 9, 12, 7, 7, 7], "loss_mask": [0, 0, 0, 0, 1, 1, 1], "resolved": True},
            {"token_ids": [3, 4], "loss_mask": [0, 1], "resolved": False}]
    path = tmp_path / "tokens.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    kept, skipped = read_traces(str(path), filter_resolved=True)
    assert len(kept) == 1 and skipped == 1
    example = token_example(kept[0]["token_ids"], kept[0]["loss_mask"])
    assert example.token_ids == rows[0]["token_ids"] and example.loss_mask == rows[0]["loss_mask"]
    assert token_example([3, 4, 5], [1, 1, 1], max_tokens=2).loss_mask == [0, 1]  # nothing predicts the first
    summary = run_sft(model_path, tokenizer_path, str(path), str(tmp_path / "out"),
                      SFTConfig(lr=3e-3, batch_size=1, epochs=0, max_steps=8, seed=0, loss_on_all_tokens=False))
    assert summary["examples"] == 1 and summary["loss_tokens"] == 3
    assert summary["losses"][-1] < summary["losses"][0]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"token_ids": [1, 2], "loss_mask": [0]}) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl:1: a token row"):
        read_traces(str(tmp_path / "bad.jsonl"), filter_resolved=False)


def test_a_cosine_schedule_decays_the_rate_to_zero_by_the_last_step(model_path, tokenizer_path, tmp_path):
    data = write_traces(tmp_path / "traces.jsonl")
    runs = {schedule: run_sft(model_path, tokenizer_path, data, str(tmp_path / schedule),
                              SFTConfig(lr=1e-3, batch_size=3, epochs=0, max_steps=6, seed=0, lr_schedule=schedule))
            for schedule in ("constant", "cosine")}
    assert runs["constant"]["lrs"] == [1e-3] * 6
    cosine = runs["cosine"]["lrs"]
    assert cosine[0] == pytest.approx(1e-3) and all(a > b for a, b in zip(cosine, cosine[1:]))
    assert cosine[-1] < 0.1e-3 and cosine[3] == pytest.approx(0.5e-3)  # half-way down at the middle step
    assert runs["cosine"]["losses"][0] == runs["constant"]["losses"][0]  # the same first step: only the rate moved
    with pytest.raises(ValueError, match="sft.lr_schedule='linear'"):
        run_sft(model_path, tokenizer_path, data, str(tmp_path / "bad"),
                SFTConfig(batch_size=3, epochs=0, max_steps=2, lr_schedule="linear"))


def test_tool_calls_in_a_message_trace_render_back_into_the_session_s_tokens(tokenizer, tokenizer_path, tmp_path):
    """A harness session's segment written as a message trace (actors/stages/harness_traces.py does) trains
    the very ids and mask the session held: the calls, their results' ids and the tools all kept."""
    bash = {"type": "function", "function": {"name": "bash", "description": "run a command", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
    chat = ChatSession(load_chat_tokenizer(tokenizer_path), "split", 4096)
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    messages = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "calc.py divides wrongly."}]
    replies = ['<tool_call>\n{"name": "bash", "arguments": {"command": "cat calc.py"}}\n</tool_call>',
               'Two at once.\n<tool_call>\n{"name": "bash", "arguments": {"command": "sed -i s#//#/# calc.py"}}\n'
               '</tool_call>\n<tool_call>\n{"name": "bash", "arguments": {"command": "pytest -q"}}\n</tool_call>',
               "Fixed: div divides."]
    for turn, text in enumerate(replies):
        chat.prompt(parse_chat_request({"model": "m", "messages": messages, "tools": [bash]}))
        ids = tokenizer.encode(text, add_special_tokens=False) + [im_end]
        reply = chat.reply(SampleOutput(ids, [0.0] * len(ids), [0] * len(ids), "stop"))
        echoed = {"role": "assistant", "content": reply.content, "tool_calls": reply.tool_calls} if reply.tool_calls \
            else {"role": "assistant", "content": reply.content}
        results = [{"role": "tool", "tool_call_id": call["id"], "content": f"out {turn}.{k}"}
                   for k, call in enumerate(reply.tool_calls)]
        messages = messages + [echoed] + results
    segment = chat.current
    (tmp_path / "traces.jsonl").write_text(json.dumps({"messages": chat.transcript(), "tools": [bash]}) + "\n")
    (row,), _ = read_traces(str(tmp_path / "traces.jsonl"), filter_resolved=True)
    assert row["messages"][4]["tool_calls"][1]["function"]["arguments"] == '{"command": "pytest -q"}'
    assert row["messages"][6]["tool_call_id"] == row["messages"][4]["tool_calls"][1]["id"]
    example = render_example(tokenizer, row["messages"], row["tools"])
    assert example.token_ids == segment.token_ids
    assert example.loss_mask == segment.loss_mask  # the replies through their end-of-turn tokens, nothing else
    trained = tokenizer.decode([t for t, m in zip(example.token_ids, example.loss_mask) if m])
    assert trained.count("<tool_call>") == 3 and '"command": "pytest -q"' in trained
    # An object for arguments (as chat templates take them) renders the same; arguments that are not JSON are refused.
    as_objects = [{**m, "tool_calls": [{"function": {"name": c["function"]["name"],
                                                     "arguments": json.loads(c["function"]["arguments"])}}
                                       for c in m["tool_calls"]]} if m.get("tool_calls") else m for m in row["messages"]]
    assert render_example(tokenizer, as_objects, row["tools"]).token_ids == segment.token_ids
    broken = [*row["messages"][:2], {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{not json"}}]}]
    with pytest.raises(ValueError, match="tool call 'bash': its arguments are not JSON"):
        render_example(tokenizer, broken, row["tools"])
