"""The pieces the container backends share, run in a real bash: a task's setup and what it hands on."""
import subprocess
from pathlib import Path

import pytest

from envs.container_sandbox import SETUP_LOG, setup_env, setup_script
from envs.loaders.common import ACTIVATE_TESTBED
from envs.outcomes import InfraError, InfraSource


def run(script: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=cwd,
                          env={"PATH": "/usr/bin:/bin", "KEEP": "same"})


def test_setup_runs_in_one_shell_and_hands_on_what_it_exported(tmp_path):
    setup = ("export PROBE=one; echo noise", "PATH=/opt/env/bin:$PATH", "cat > made.txt <<'EOF'\nbug\nEOF",
             ACTIVATE_TESTBED)  # no conda here: the image keeps its own interpreter
    done = run(setup_script(setup), tmp_path)
    assert done.returncode == 0, done.stderr
    # Only what setup changed, none of the shell's own state; its output is not in the listing.
    assert setup_env(done.stdout) == {"PROBE": "one", "PATH": "/opt/env/bin:/usr/bin:/bin"}
    assert (tmp_path / "made.txt").read_text() == "bug\n" and "noise" not in done.stdout


@pytest.mark.parametrize("failing", ["echo before; false", "echo before; exit 7"])
def test_setup_stops_at_the_first_failure_with_its_output(tmp_path, failing):
    done = run(setup_script((failing, "touch never")), tmp_path)
    assert done.returncode in (1, 7) and "before" in done.stderr and not (tmp_path / "never").exists()
    assert not Path(SETUP_LOG).exists()


def test_a_listing_that_is_not_two_environments_is_an_infra_error():
    with pytest.raises(InfraError) as caught:
        setup_env("garbage")
    assert caught.value.source == InfraSource.SANDBOX and "environment listings" in str(caught.value)


def test_the_setup_log_is_removed(tmp_path):
    assert run(setup_script(("echo some output",)), tmp_path).returncode == 0
    assert not Path(SETUP_LOG).exists()  # the agent's /tmp holds nothing of the setup
