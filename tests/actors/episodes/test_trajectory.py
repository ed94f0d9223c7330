"""A harness trajectory keeps every segment's messages and tools beside its tokens, and its summary shows them."""
from actors.episodes.episode_actor import EpisodeActor
from actors.episodes.trajectory import Trajectory
from policies.chat.chat_session import ChatSession
from policies.chat.chat_tokenizer import IM_END, load_chat_tokenizer
from policies.chat.openai_wire import parse_chat_request
from policies.sample_types import SampleOutput

BASH = [{"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}}}}]
SYSTEM = {"role": "system", "content": "You fix bugs."}


def _answer(tok, chat, messages, text, tools=None):
    chat.prompt(parse_chat_request({"model": "m", "messages": messages, **({"tools": tools} if tools else {})}))
    ids = tok.encode(text) + [tok.convert_tokens_to_ids(IM_END)]
    return chat.reply(SampleOutput(ids, [-0.5] * len(ids), [1] * len(ids), "stop"))


def test_each_segment_s_messages_and_tools_are_kept_aligned_with_its_tokens(tokenizer_path):
    tok = load_chat_tokenizer(tokenizer_path)
    chat = ChatSession(tok, "split", 4096)
    first = [SYSTEM, {"role": "user", "content": "calc.py is wrong."}]
    reply = _answer(tok, chat, first, '<tool_call>\n{"name": "bash", "arguments": {"command": "cat calc.py"}}\n</tool_call>',
                    BASH)
    call = reply.tool_calls[0]
    extended = first + [{"role": "assistant", "content": None, "tool_calls": [call]},
                        {"role": "tool", "tool_call_id": call["id"], "content": "def div(a, b): return a // b"}]
    _answer(tok, chat, extended, "It floors.", BASH)
    compacted = [SYSTEM, {"role": "user", "content": "Summary: div floors. Fix it."}]  # a history rewrite
    _answer(tok, chat, compacted, "Done.")
    traj = Trajectory(0, 0, 0, "t", 0, "resolved")
    EpisodeActor._take_segments(chat, traj)
    assert len(traj.segment_starts) == len(traj.segment_messages) == len(traj.segment_tools) == 2
    assert traj.segment_tools == [BASH, None]
    earlier, last = traj.segment_messages
    assert earlier[:4] == extended and earlier[4] == {"role": "assistant", "content": "It floors."}
    assert earlier[2]["tool_calls"][0]["function"]["arguments"] == '{"command": "cat calc.py"}'
    assert earlier[3]["tool_call_id"] == call["id"]
    assert last == compacted + [{"role": "assistant", "content": "Done."}] == traj.messages
    # Each segment's messages are those of its tokens: the sample that trains it decodes to them.
    samples = traj.samples(1.0)
    assert "div(a, b)" in tok.decode(samples[0].token_ids) and "div(a, b)" not in tok.decode(samples[1].token_ids)
    summary = traj.summary()
    assert summary["segments"] == 2 and summary["segment_messages"] == [earlier, last]
    assert summary["segment_tools"] == [BASH, None] and summary["messages"] == last


def test_a_trajectory_without_segments_keeps_its_summary_as_it_was():
    traj = Trajectory(0, 0, 0, "t", 0, "resolved", messages=[SYSTEM])
    summary = traj.summary()
    assert summary["messages"] == [SYSTEM] and "segment_messages" not in summary and "segment_tools" not in summary


def test_a_step_record_keeps_each_generated_token_s_version_and_whether_it_was_trained():
    """Two replies (tokens 3-4 and 7-9) between prompt and observation tokens; the second began under
    v1 and ended under v2 (a weight update mid-reply); the update at v3 masked the v1 tokens (token
    staleness past its bound): the step's row keeps what the page colours and marks."""
    from actors.episodes.trajectory import Batch

    traj = Trajectory(4, 1, 0, "t", 0, "resolved", reward=1.0, started_s=10.0, finished_s=12.5,
                      token_ids=[1, 2, 3, 4, 5, 6, 7, 8, 9], loss_mask=[0, 0, 1, 1, 0, 0, 1, 1, 1],
                      versions=[0, 0, 1, 1, 0, 0, 1, 2, 2], model_patch="diff --git a/x b/x\n",
                      test_status={"test_x.py::test_a": "PASSED"}, hidden_status={"case 1": "FAILED (3 != 4)"})
    trained = [0, 0, 0, 0, 0, 0, 0, 1, 1]
    batch = Batch(3, [], [traj, traj], 1.0, advantages=[0.5, -0.5], trained_masks=[trained, trained])
    row, = batch.trajectory_rows(limit=1)
    assert row["tokens"] == {"ids": [3, 4, 7, 8, 9], "replies": [2, 3], "versions": [[1, 3], [2, 2]],
                             "trained": [[0, 3], [1, 2]]}
    assert (row["trained_version"], row["advantage"], row["staleness"]) == (3, 0.5, 2)  # its oldest token: v1
    assert (row["started_s"], row["finished_s"], row["model_patch"]) == (10.0, 12.5, "diff --git a/x b/x\n")
    assert row["test_status"] == {"test_x.py::test_a": "PASSED"} and row["hidden_status"] == {"case 1": "FAILED (3 != 4)"}
    assert "tokens" not in traj.summary()  # an eval's attempts keep no tokens


def test_the_grader_s_verdict_test_by_test_is_kept_from_the_last_step_s_info():
    traj = Trajectory(0, 0, 0, "t", 0, "truncated")
    traj.record_end(0.0, True, {"outcome": "unresolved", "model_patch": "p", "tampered": {},
                                "test_status": {"a": "FAILED"}, "hidden_status": {"h": "PASSED"},
                                "grading_problems": ["a run's exit code is missing"]},
                    final_change=lambda: ("", {}))
    assert (traj.outcome, traj.test_status, traj.hidden_status) == ("unresolved", {"a": "FAILED"}, {"h": "PASSED"})
    assert traj.summary()["grading_problems"] == ["a run's exit code is missing"]
