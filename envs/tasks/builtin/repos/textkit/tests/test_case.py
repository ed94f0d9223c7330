from textkit.case import camel_to_snake, snake_to_camel, title_case


def test_snake_to_camel():
    assert snake_to_camel("parse_http_header") == "parseHttpHeader"


def test_camel_to_snake():
    assert camel_to_snake("parseHttpHeader") == "parse_http_header"


def test_camel_to_snake_single_letter_prefix():
    assert camel_to_snake("xCoord") == "x_coord"


def test_title_case_minor_words():
    assert title_case("war and peace") == "War and Peace"


def test_title_case_leading_minor_word():
    assert title_case("the lord of the rings") == "The Lord of the Rings"
