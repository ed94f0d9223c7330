from envs.tasks.pytest_summary import MISSING, PASSED, node_id_of, parse_test_status, suite_status, summary_lines


def test_parse_missing_skipped_and_failed_tests():
    output = "\n".join(
        [
            "PASSED tests/t.py::test_a",
            "FAILED tests/t.py::test_b - AssertionError: assert 1 == 2",
            "SKIPPED [1] tests/t.py:9: not today",
            "ERROR tests/t.py::test_d - fixture 'x' not found",
            "  PASSED tests/t.py::test_e",
        ]
    )
    ids = ["tests/t.py::test_a", "tests/t.py::test_b", "tests/t.py::test_c", "tests/t.py::test_d", "tests/t.py::test_e"]
    assert parse_test_status(output, ids) == {
        "tests/t.py::test_a": PASSED,
        "tests/t.py::test_b": "FAILED",
        "tests/t.py::test_c": MISSING,
        "tests/t.py::test_d": "ERROR",
        "tests/t.py::test_e": MISSING,
    }


def test_only_lines_after_the_summary_header_count_when_there_is_one():
    """A test may print "PASSED <id>" into its captured output, which -rA shows above the summary."""
    output = "\n".join([
        "----------------------------- Captured stdout call -----------------------------",
        "PASSED tests/t.py::test_b",
        "=========================== short test summary info ============================",
        "PASSED tests/t.py::test_a",
        "FAILED tests/t.py::test_b - assert 1 == 2",
    ])
    assert parse_test_status(output, ["tests/t.py::test_a", "tests/t.py::test_b", "tests/t.py::test_c"]) == {
        "tests/t.py::test_a": PASSED, "tests/t.py::test_b": "FAILED", "tests/t.py::test_c": MISSING}
    assert summary_lines(output) == [(PASSED, "tests/t.py::test_a"), ("FAILED", "tests/t.py::test_b - assert 1 == 2")]


def test_a_parametrized_id_holding_the_message_separator_is_found():
    node_id = "tests/t.py::test_range[a - b]"
    assert node_id_of(f"{node_id} - AssertionError", {node_id}) == node_id
    assert node_id_of(node_id, {node_id}) == node_id
    assert node_id_of("tests/t.py::test_other - x", {node_id}) is None
    assert parse_test_status(f"FAILED {node_id} - assert 0", [node_id]) == {node_id: "FAILED"}


def test_suite_status_names_every_test():
    output = "PASSED tests/t.py::test_a\nFAILED tests/t.py::test_b - boom\nSKIPPED [1] tests/t.py:9: later"
    assert suite_status(output) == {"tests/t.py::test_a": PASSED, "tests/t.py::test_b": "FAILED",
                                    "[1] tests/t.py:9: later": "SKIPPED"}
