import json

from actors.report.fix_patterns import first_edit_kind, fix_patterns, stage_fix_patterns, table

ISSUE = "clip_values returns a wrong result\n\n`clip_values(2)` returns `[0]`. Probably `x - 1)` should be `x)` in mod.py."


def conversation(*commands, issue=ISSUE):
    messages = [{"role": "system", "content": "Fix the bug."}, {"role": "user", "content": issue}]
    for command in commands:
        messages += [{"role": "assistant", "content": f"```bash\n{command}\n```"},
                     {"role": "user", "content": "exit code: 0\n"}]
    return messages


def test_the_first_sed_edit_is_set_against_the_hint():
    assert first_edit_kind(conversation("grep -n x mod.py", "sed -i '3s/x - 1)/x)/' mod.py")) == "copies the hint"
    assert first_edit_kind(conversation("sed -i 's/x - 1)/y)/' mod.py")) == "hint's old text, other new text"
    assert first_edit_kind(conversation("sed -i '3s/p - 1)/z)/' mod.py")) == "hint's shape, other names"
    assert first_edit_kind(conversation("sed -i '3s/range/list/' mod.py")) == "other edit"
    assert first_edit_kind(conversation("sed -i '3s/x - 1)/x)' mod.py")) == "other edit"  # unterminated
    # Only the first edit counts: a later exact copy does not turn a wrong first edit right.
    assert first_edit_kind(conversation("sed -i '3s/p - 1)/z)/' mod.py", "sed -i '3s/x - 1)/x)/' mod.py")) \
        == "hint's shape, other names"
    assert first_edit_kind(conversation("python -m pytest -q", "submit")) == "no sed edit"


def test_an_issue_without_a_hint_is_left_out():
    assert first_edit_kind(conversation("sed -i '3s/a/b/' mod.py", issue="f returns a wrong result")) is None


def test_counts_by_family_and_kind_leave_out_infra_errors_and_hintless_tasks():
    attempts = [
        {"task_id": "a", "outcome": "resolved", "messages": conversation("sed -i '3s/x - 1)/x)/' mod.py")},
        {"task_id": "a", "outcome": "truncated", "messages": conversation("sed -i '3s/p - 1)/z)/' mod.py")},
        {"task_id": "a", "outcome": "truncated", "infra_source": "sandbox",
         "messages": conversation("sed -i '3s/x - 1)/x)/' mod.py")},
        {"task_id": "b", "outcome": "resolved", "messages": conversation("sed -i 's/a/b/' mod.py", issue="no hint")},
    ]
    assert fix_patterns(attempts, {"a": "off_by_one", "b": "compare"}) == {"off_by_one": {
        "copies the hint": {"attempts": 1, "resolved": 1},
        "hint's shape, other names": {"attempts": 1, "resolved": 0}}}


def test_a_stage_directory_gives_its_table(tmp_path):
    stage = tmp_path / "rl"
    stage.mkdir()
    (stage / "eval.json").write_text(json.dumps({"per_task": [{"task_id": "a", "family": "off_by_one", "n": 1,
                                                                "resolved": 1}]}))
    (stage / "attempts.jsonl").write_text(json.dumps(
        {"task_id": "a", "outcome": "resolved", "messages": conversation("sed -i '3s/x - 1)/x)/' mod.py")}) + "\n")
    patterns = stage_fix_patterns(stage)
    assert patterns == {"off_by_one": {"copies the hint": {"attempts": 1, "resolved": 1}}}
    text = table({"sft": {}, "rl": patterns})
    assert "off_by_one   copies the hint" in text and "  0 (  0) |   1 (  1)" in text


def test_harness_replies_with_tool_calls_or_no_content_are_read_not_a_crash():
    messages = [{"role": "system", "content": None},
                {"role": "user", "content": [{"type": "text", "text": ISSUE}]},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "bash", "arguments": "{\"command\": \"sed -i '3s/x - 1)/x)/' mod.py\"}"}}]}]
    assert first_edit_kind(messages) == "copies the hint"
    assert first_edit_kind(messages[:2] + [{"role": "assistant", "content": None}]) == "no sed edit"


def test_a_harness_s_own_fence_is_read_as_its_command():
    """mini-swe-agent's text configuration fences its commands as ```mswea_bash_command."""
    messages = conversation()
    messages.append({"role": "assistant", "content": "THOUGHT: fix it.\n\n```mswea_bash_command\nsed -i '3s/x - 1)/x)/' mod.py\n```"})
    assert first_edit_kind(messages) == "copies the hint"
    messages[-1] = {"role": "assistant", "content": "```python\nsed -i '3s/x - 1)/x)/' mod.py\n```"}
    assert first_edit_kind(messages) == "no sed edit"  # not a shell command block
