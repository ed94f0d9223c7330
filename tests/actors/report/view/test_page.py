"""The page: one file that holds its data, where nothing of the run can close a data block or reach
the page as markup, no secret is left, and `--serve` answers the page alone, on loopback."""
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from actors.cli.main import main
from actors.report.view.page import PAGE_NAME
from tests.actors.report.view.run_fixture import HOSTILE, write_run

REPO = Path(__file__).resolve().parents[4]


def test_the_page_holds_every_chunk_and_nothing_of_the_run_closes_a_block(tmp_path, tokenizer_path, capsys):
    root = write_run(tmp_path / "run", tokenizer_path)
    assert main(["view", str(root)]) == 0
    page = root / PAGE_NAME
    assert f"view: {page}" in capsys.readouterr().out
    html = page.read_text()
    blocks = re.findall(r'<script type="application/json" id="data-([^"]+)">', html)
    assert blocks == ["index", "step-rl-1", "attempts-0"]
    # The hostile message is data: its "</script>" is escaped, so the page has our scripts alone.
    assert html.count("</script>") == len(blocks) + 1 and "<\\/script><script>document.title" in html
    assert HOSTILE not in html and "http://" not in html.replace("http://www.w3.org", "")  # nothing to fetch


def test_no_secret_reaches_the_page(tmp_path, tokenizer_path, monkeypatch):
    secret = "Kp3Vx8Qz2Lm7Rt4W"
    monkeypatch.setenv("SWERVE_VIEW_PAGE_API_KEY", secret)
    root = write_run(tmp_path / "run", tokenizer_path, secret=secret)
    assert main(["view", str(root)]) == 0
    assert secret not in (root / PAGE_NAME).read_text()


@pytest.mark.slow  # a swerve process serving the page
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_serve_answers_the_page_on_loopback_and_nothing_beside_it_until_stopped(tmp_path, tokenizer_path, stop):
    """`swerve view RUN --serve` as a user runs it: the URL it prints answers the page; the run's
    other files are not served; Ctrl-C (SIGINT) or a `kill` (SIGTERM) ends it cleanly."""
    root = write_run(tmp_path / "run", tokenizer_path)
    # SIGINT at its default, as for a terminal's foreground job: a runner started in the background
    # of a non-interactive shell ignores SIGINT, and its children would inherit that.
    server = subprocess.Popen(["env", "--default-signal=SIGINT", sys.executable, "-m", "actors", "view", str(root),
                               "--serve"], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        lines = []
        while not any("serving the view on" in line for line in lines):
            line = server.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        url = re.search(r"on (http://127\.0\.0\.1:\d+/) ", lines[-1]).group(1)
        assert urllib.request.urlopen(url, timeout=10).read() == (root / PAGE_NAME).read_bytes()
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url + "rl/metrics.jsonl", timeout=10)
        assert err.value.code == 404
    finally:
        os.killpg(server.pid, stop)
        try:
            rest = server.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)  # a server the signal did not end outlives no test
            server.communicate()
            raise
    assert server.returncode == 0 and "view server ended" in rest
