"""A port already in use: start the real CPU engine server (python -m policies.server) on
a port this process holds; it must exit with one line naming the port and the fix."""
from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from bench.adversarial.bad_inputs.probe import Probe, ProbeResult

REPO_ROOT = Path(__file__).resolve().parents[3]
# Starting the server imports torch: seconds, more on a loaded machine.
SERVER_EXIT_TIMEOUT_S = 120.0


def _port_in_use(tmp_dir: Path) -> ProbeResult:
    from policies.server.app import EXIT_BAD_INPUT

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        # The model directory is never read: the port is checked before the model loads.
        argv = [sys.executable, "-m", "policies.server", "--model-path", str(tmp_dir), "--port", str(port)]
        done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=SERVER_EXIT_TIMEOUT_S)
    lines = done.stderr.strip().splitlines()
    message = lines[-1] if lines else f"exit status {done.returncode}, nothing on stderr"
    return ProbeResult(done.returncode == EXIT_BAD_INPUT and "Traceback" not in done.stderr, message)


PROBES = [Probe("port_in_use", "port", _port_in_use, "is already in use")]
