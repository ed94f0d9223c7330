"""`python -m policies.server` refuses bad input with one line naming the fix (no traceback)."""
from __future__ import annotations

import socket

import pytest

from policies.server.app import EXIT_BAD_INPUT, PortInUse, check_port_free, main


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_port_in_use_is_refused_before_the_model_loads(taken_port, tmp_path, capsys):
    # The model directory does not exist: the port is checked first, so its error is the one named.
    status = main(["--model-path", str(tmp_path / "missing"), "--port", str(taken_port)])
    err = capsys.readouterr().err
    assert status == EXIT_BAD_INPUT
    assert f"port {taken_port} on 127.0.0.1 is already in use" in err and "--port 0" in err
    assert "Traceback" not in err


def test_check_port_free_passes_a_free_port_and_port_zero(taken_port):
    with pytest.raises(PortInUse, match=f"port {taken_port} "):
        check_port_free("127.0.0.1", taken_port)
    check_port_free("127.0.0.1", 0)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
    check_port_free("127.0.0.1", free)


@pytest.mark.parametrize("make_dir, fragment", [(False, "no model directory at"), (True, "has no config.json")])
def test_missing_model_dir_is_refused_naming_the_option(tmp_path, capsys, make_dir, fragment):
    model_dir = tmp_path / "model"
    if make_dir:
        model_dir.mkdir()
    status = main(["--model-path", str(model_dir), "--port", "0"])
    err = capsys.readouterr().err
    assert status == EXIT_BAD_INPUT
    assert fragment in err and "--model-path" in err and str(model_dir) in err
