import random
import string

import pytest

from envs.actions import COMMAND, FORMAT_ERROR, MAX_COMMAND_BYTES, MAX_REPLY_CHARS, SUBMIT, parse_action


def test_one_block_is_a_command():
    action = parse_action("THOUGHT: look.\n\n```bash\ncat calc.py\n```\n")
    assert action.kind == COMMAND
    assert action.command == "cat calc.py"


def test_sh_fence_is_accepted():
    assert parse_action("```sh\nls -la\n```").command == "ls -la"


def test_zero_blocks_is_a_format_error():
    action = parse_action("I think the bug is in calc.py.")
    assert action.kind == FORMAT_ERROR
    assert "found no" in action.error


def test_two_blocks_is_a_format_error():
    action = parse_action("```bash\nls\n```\nthen\n```bash\ncat a.py\n```")
    assert action.kind == FORMAT_ERROR
    assert "found 2" in action.error


def test_submit():
    assert parse_action("Done.\n```bash\nsubmit\n```").kind == SUBMIT


def test_empty_block_is_a_format_error():
    assert parse_action("```bash\n   \n```").kind == FORMAT_ERROR


def test_random_garbage_is_a_format_error():
    rng = random.Random(0)
    alphabet = string.printable + "\x00é漢"
    for _ in range(200):
        reply = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 200)))
        assert parse_action(reply).kind == FORMAT_ERROR


def test_megabytes_of_text_are_a_format_error_naming_the_limit():
    reply = "x" * (MAX_REPLY_CHARS + 1) + "\n```bash\nls\n```\n"
    action = parse_action(reply)
    assert action.kind == FORMAT_ERROR
    assert f"over the limit of {MAX_REPLY_CHARS}" in action.error


def test_command_too_long_for_one_exec_argument_is_a_format_error():
    action = parse_action("```bash\necho " + "y" * MAX_COMMAND_BYTES + "\n```")
    assert action.kind == FORMAT_ERROR
    assert f"over the limit of {MAX_COMMAND_BYTES}" in action.error and "shorter commands" in action.error
    # Multi-byte characters count as bytes, as exec sees them.
    assert parse_action("```bash\necho " + "é" * (MAX_COMMAND_BYTES // 2) + "\n```").kind == FORMAT_ERROR
    assert parse_action("```bash\necho " + "é" * (MAX_COMMAND_BYTES // 4) + "\n```").kind == COMMAND


def test_nul_byte_in_the_command_is_a_format_error():
    action = parse_action("```bash\necho \x00\xff\x01garbage\n```")
    assert action.kind == FORMAT_ERROR and "NUL byte" in action.error


@pytest.mark.parametrize("surrogate", ["\ud800", "\udfff", "\udc80"])
def test_a_lone_surrogate_in_the_command_is_a_format_error(surrogate):
    # No backend can send it as UTF-8; \udc80 would even reach bash as a raw byte unjailed.
    action = parse_action(f"```bash\necho a{surrogate}b\n```")
    assert action.kind == FORMAT_ERROR and "not valid UTF-8" in action.error and "character 6" in action.error
    action.error.encode("utf-8")  # the observation itself can be sent back
    assert parse_action("```bash\necho \U0001F600\n```").kind == COMMAND  # a paired one is a character
