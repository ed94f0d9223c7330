"""`swerve tito-check`: which chat templates render incrementally, and where the others differ."""
from __future__ import annotations

import json
import shutil

import pytest

from actors.cli.main import main as swerve
from policies.chat.chat_tokenizer import load_chat_tokenizer
from policies.chat.tito_check import CONVERSATIONS, QWEN3_STYLE, check, load
from policies.tokenizer import CHAT_TEMPLATE


def _run(capsys, *argv) -> tuple[int, str, str]:
    status = swerve(["tito-check", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def _by_name(report: dict) -> dict:
    return {result["name"]: result for result in report["conversations"]}


def test_the_embedded_tokenizer_renders_every_conversation_incrementally(capsys, tokenizer_path, tokenizer):
    status, out, _ = _run(capsys, "--tokenizer", tokenizer_path)
    assert status == 0
    assert out.count(" OK (") == len(CONVERSATIONS) == 6
    assert "6 of 6 conversations" in out
    # transformers' tokenizer renders the same template, so it passes too.
    assert all(result["ok"] for result in check(tokenizer))


def test_a_qwen3_style_template_drops_earlier_reasoning(capsys, tokenizer_path):
    status, out, _ = _run(capsys, "--tokenizer", tokenizer_path, "--chat-template", QWEN3_STYLE, "--json")
    assert status == 1
    report = json.loads(out)
    assert report["incremental"] is False and report["chat_template"] == QWEN3_STYLE
    results = _by_name(report)
    reasoning = results["reasoning"]
    assert not reasoning["ok"] and reasoning["stage"] == "after message 2"
    alone, followed = reasoning["sides"]["history alone"], reasoning["sides"]["history followed"]
    # Both sides agree up to the assistant's turn; alone it keeps its reasoning, followed by the
    # next user message it is dropped.
    assert alone["before"] == followed["before"] and alone["before"].endswith("<|im_start|>assistant\n")
    assert (alone["token"] + alone["after"]).startswith("<think>\n91")
    assert (followed["token"] + followed["after"]).startswith("No: 91")
    assert "<think>" in reasoning["detail"]
    # Reasoning followed only by tool results is kept: Qwen3 renders that incrementally.
    assert results["reasoning across tool calls"]["ok"]
    # ... while a final turn without reasoning gains an empty <think> block only while it is last.
    assert (results["multi-turn text"]["sides"]["history alone"]["after"]).startswith("think>\n\n</")


def test_re_serialised_tool_call_arguments_fail_at_the_first_respaced_token(capsys, tokenizer_path, tmp_path):
    compact = CHAT_TEMPLATE.replace("call.arguments | tojson", "call.arguments | tojson(separators=(',', ':'))")
    assert compact != CHAT_TEMPLATE
    (tmp_path / "compact.jinja").write_text(compact)
    status, out, _ = _run(capsys, "--tokenizer", tokenizer_path, "--chat-template", str(tmp_path / "compact.jinja"),
                          "--json")
    assert status == 1
    results = _by_name(json.loads(out))
    assert results["multi-turn text"]["ok"] and results["system and developer"]["ok"]
    tools = results["tool calls"]
    assert not tools["ok"] and tools["stage"] == "whole conversation"
    held, one_piece = tools["sides"]["held"], tools["sides"]["one piece"]
    assert held["before"] == one_piece["before"] and held["token"] != one_piece["token"]
    held_text = held["before"] + held["token"] + held["after"]
    one_piece_text = one_piece["before"] + one_piece["token"] + one_piece["after"]
    # The model wrote `{"path": "calc.py"}`; the template re-serialises it as `{"path":"calc.py"}`.
    assert '{"path": "calc.py"}' in held_text and '{"path":"calc.py"}' in one_piece_text
    # The named token is the first that holds the differing character (the space), on one side or the other.
    at = held_text.index('{"path": "calc.py"}') + len('{"path":')
    assert len(held["before"]) <= at < len(held["before"]) + max(len(held["token"]), len(one_piece["token"]))


def test_text_report_names_the_token_on_both_sides(capsys, tokenizer_path):
    status, out, _ = _run(capsys, "--tokenizer", tokenizer_path, "--chat-template", QWEN3_STYLE)
    assert status == 1
    line = next(line for line in out.splitlines() if line.strip().startswith("reasoning "))
    assert "NOT INCREMENTAL (after message 2) at token" in line
    assert "history alone:" in out and "history followed:" in out
    assert "1 of 6 conversations" in out


@pytest.mark.parametrize("problem", ["missing", "no tokenizer.json", "no template", "no such template file"])
def test_a_directory_that_cannot_be_checked_exits_2_naming_the_fix(capsys, tokenizer_path, tmp_path, problem):
    argv = ["--tokenizer", str(tmp_path / "nope")]
    if problem == "no tokenizer.json":
        argv = ["--tokenizer", str(tmp_path)]
    elif problem == "no template":
        shutil.copy(f"{tokenizer_path}/tokenizer.json", tmp_path)
        argv = ["--tokenizer", str(tmp_path)]
    elif problem == "no such template file":
        argv = ["--tokenizer", tokenizer_path, "--chat-template", str(tmp_path / "none.jinja")]
    status, out, err = _run(capsys, *argv)
    assert status == 2 and out == ""
    assert "--chat-template" in err if problem.endswith("file") else "pass --tokenizer a directory" in err


def test_load_replaces_only_the_template(tokenizer_path):
    ours = load(tokenizer_path, QWEN3_STYLE)
    assert ours.chat_template != CHAT_TEMPLATE
    assert load(tokenizer_path).chat_template == load_chat_tokenizer(tokenizer_path).chat_template == CHAT_TEMPLATE


@pytest.mark.slow
def test_without_a_directory_it_checks_the_configured_tokenizer(capsys, cache_dir, tokenizer_path):
    status, out, _ = _run(capsys, f"tokenizer.cache_dir={cache_dir}", "tokenizer.vocab_size=512")
    assert status == 0
    assert out.startswith(f"tito-check {tokenizer_path} (chat template: the directory's)")


def test_sampled_text_is_what_the_embedded_template_renders(tokenizer_path):
    from policies.chat.tito_check import sampled_text

    ours = load_chat_tokenizer(tokenizer_path)
    message = {"role": "assistant", "reasoning_content": "r", "content": "c", "tool_calls": [
        {"function": {"name": "bash", "arguments": {"command": "ls"}}}, {"name": "x", "arguments": '{"a":1}'}]}
    rendered = ours.apply_chat_template([message], tokenize=False)
    assert rendered == f"<|im_start|>assistant\n{sampled_text(message)}<|im_end|>\n"
    assert sampled_text(message) == ('<think>\nr\n</think>\n\nc\n<tool_call>\n{"name": "bash", "arguments": '
                                     '{"command": "ls"}}\n</tool_call>\n<tool_call>\n{"name": "x", "arguments": '
                                     '{"a":1}}\n</tool_call>')
