import pytest

from confparse.typed import get_bool, get_int, get_list, load_layers, merge

# What parse() returns for:
#   [features]
#   debug = yes
#   cache = off
#   verbose = On
#   [limits]
#   workers = 4
#   retries = 0
#   tags = web, api,, internal
CONFIG = {
    "": {},
    "features": {"debug": "yes", "cache": "off", "verbose": "On"},
    "limits": {"workers": "4", "retries": "0", "tags": "web, api,, internal"},
}


def test_get_bool_true_words():
    assert get_bool(CONFIG, "features", "debug") is True
    assert get_bool(CONFIG, "features", "verbose") is True


def test_get_bool_false_words():
    assert get_bool(CONFIG, "features", "cache") is False


def test_get_bool_default():
    assert get_bool(CONFIG, "features", "missing", default=True) is True
    assert get_bool(CONFIG, "nosection", "debug") is False


def test_get_bool_rejects_other_words():
    with pytest.raises(ValueError):
        get_bool({"a": {"flag": "maybe"}}, "a", "flag")


def test_get_int():
    assert get_int(CONFIG, "limits", "workers") == 4
    assert get_int(CONFIG, "limits", "missing", default=7) == 7


def test_get_int_minimum():
    assert get_int(CONFIG, "limits", "workers", minimum=4) == 4
    with pytest.raises(ValueError):
        get_int(CONFIG, "limits", "retries", minimum=1)


def test_get_list():
    assert get_list(CONFIG, "limits", "tags") == ["web", "api", "internal"]


def test_get_list_missing_key():
    assert get_list(CONFIG, "limits", "missing") == []


def test_merge_override_wins():
    base = {"a": {"x": "1", "y": "2"}}
    override = {"a": {"y": "3"}, "b": {"z": "4"}}
    assert merge(base, override) == {"a": {"x": "1", "y": "3"}, "b": {"z": "4"}}
    assert base == {"a": {"x": "1", "y": "2"}}


def test_load_layers_user_wins():
    config = load_layers("[server]\nport = 80\nhost = a\n", "[server]\nport = 8080\n")
    assert config["server"] == {"port": "8080", "host": "a"}
