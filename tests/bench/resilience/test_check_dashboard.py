"""`make check-dashboard` inside `make test`: a real headless Chromium shows every role of a short run
in Ray's dashboard, and the screenshot is left where the README says (runs/check-dashboard/)."""
import subprocess
import sys
from pathlib import Path

import pytest

from bench.browser import browser_path

REPO = Path(__file__).resolve().parents[3]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.slow  # a training run with its dashboard, and a browser


def test_every_role_is_shown_in_the_dashboard(swerve_cache):
    if browser_path() is None:
        pytest.skip("no headless browser: `make chromium` installs Debian's chromium (make test does)")
    run_dir = REPO / "runs" / "check-dashboard"
    done = subprocess.run([sys.executable, "-m", "bench.resilience.check_dashboard", "--run-dir", str(run_dir),
                           f"model.cache_dir={swerve_cache}", f"tokenizer.cache_dir={swerve_cache}"],
                          cwd=REPO, capture_output=True, text=True, timeout=560)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "every role shown" in done.stdout  # it exits non-zero naming a missing role otherwise
    shot = (run_dir / "dashboard-actors.png").read_bytes()
    assert shot.startswith(PNG_MAGIC) and len(shot) > 20_000  # a rendered page, not a blank one
