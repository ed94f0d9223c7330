import random
import string

from policies.actions import COMMAND, FORMAT_ERROR, SUBMIT, parse_action


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
