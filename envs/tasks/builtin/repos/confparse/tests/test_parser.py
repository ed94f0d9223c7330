import pytest

from confparse.parser import ParseError, parse, unquote

SAMPLE = """
name = demo

[server]
host = localhost
Port = 8080
"""


def test_sections_and_keys():
    config = parse(SAMPLE)
    assert config[""] == {"name": "demo"}
    assert config["server"] == {"host": "localhost", "port": "8080"}


def test_comments_and_blank_lines_are_skipped():
    config = parse("# a comment\n\n; another\n[db]\nuser = admin\n")
    assert config == {"": {}, "db": {"user": "admin"}}


def test_unclosed_section_header_raises():
    with pytest.raises(ParseError):
        parse("[server\nhost = x\n")


def test_empty_section_name_raises():
    with pytest.raises(ParseError):
        parse("[ ]\n")


def test_missing_equals_raises_with_line_number():
    with pytest.raises(ParseError) as error:
        parse("[a]\nx = 1\njunk\n")
    assert error.value.line_number == 3
    assert str(error.value).startswith("line 3:")


def test_values_keep_inner_equals():
    assert parse("url = http://x/?a=b\n")[""]["url"] == "http://x/?a=b"


def test_unquote():
    assert unquote('"hello world"') == "hello world"
    assert unquote("'x'") == "x"
    assert unquote("plain") == "plain"


def test_unquote_empty_quotes():
    assert unquote('""') == ""
    assert parse("title = ''\n")[""]["title"] == ""


def test_quoted_values_in_parse():
    assert parse('greeting = "hi there"\n')[""]["greeting"] == "hi there"
