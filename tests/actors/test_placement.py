"""Scale-out by resources: sandboxes go to the node that declares `sandbox`, engines and trainers elsewhere."""
import pytest
import json
import subprocess
import sys
from pathlib import Path

pytestmark = pytest.mark.slow  # a 2-node Ray cluster

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "placement_run.py"


def test_roles_are_placed_by_custom_resources(tmp_path, swerve_cache):
    run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), swerve_cache], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    nodes = {a["name"]: a["node_id"] for a in report["actors"]}
    sandboxes = [n for n in nodes if n.startswith("sandbox-")]
    assert sandboxes, nodes
    assert all(nodes[n] == report["sandbox_node"] for n in sandboxes)
    for name in ("engine-0", "trainer-0"):
        assert nodes[name] != report["sandbox_node"]
