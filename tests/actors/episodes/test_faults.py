"""Fault injection (faults.*): the plan injects only the kinds whose rates are set, a grader crash
is the grader's infra error, a removed node costs episodes. Every kind injected into one real run,
each ending as infra_error with its source, never trained, its member re-run: the reliability
bench's fault run (tests/bench/resilience/test_reliability.py). Longer variants: `swerve bench reliability`."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from actors.episodes.faults import FaultPlan
from actors.fleet.remote import SandboxLease
from actors.training.sample_collector import COUNTERS
from configs.schema import FaultsConfig, SandboxConfig
from envs.grading.grader import grade
from envs.outcomes import InfraError, InfraSource
from envs.sandboxes.sandbox import ExecResult
from envs.tasks.loaders import load_tasks

pytestmark = pytest.mark.slow  # training runs with injected faults and a 2-node cluster

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "bench" / "resilience" / "node_loss_run.py"
IDENTITY = COUNTERS[1:]


def show(capsys, title: str, text: str) -> None:
    with capsys.disabled():
        print(f"\n{title}\n{text}")


class RecordingLease:
    """The SandboxLease surface the wrapper uses, recording what reached it."""

    def __init__(self):
        self.calls, self.kills = [], 0

    def kill(self):
        self.kills += 1

    def start(self, task):
        self.calls.append(("start", task.id))

    def exec(self, command, timeout_s=None):
        self.calls.append(("exec", command))
        return ExecResult(0, "", False, 0.0, False, timeout_s or 20.0)

    def close(self):
        self.calls.append(("close",))


def test_no_rate_set_installs_no_wrapper_and_each_rate_injects_only_its_kind():
    assert FaultPlan.for_episode(FaultsConfig(engine_kill_rate=1.0), seed=0) is None  # the driver's draw
    task = load_tasks("builtin", "train")[0]
    lease = RecordingLease()
    plan = FaultPlan.for_episode(FaultsConfig(grader_crash_rate=1.0), seed=0)
    faulty = plan.wrap_sandbox(lease)
    faulty.start(task)
    faulty.exec("python -m pytest -q test_x.py")  # the agent's own test run is not the grader's
    assert lease.kills == 0
    faulty.exec(f"{task.test_command} tests/test_a.py::test_b")  # the grader's run dies under it
    assert lease.kills == 1 and plan.injected == {"grader_crash": 1}
    assert [c[0] for c in lease.calls] == ["start", "exec", "exec"]  # every call still reaches the lease
    starts = FaultPlan.for_episode(FaultsConfig(sandbox_start_fail_rate=1.0), seed=0)
    with pytest.raises(InfraError) as err:
        starts.wrap_sandbox(RecordingLease()).start(task)
    assert err.value.source == InfraSource.SANDBOX and starts.injected == {"sandbox_start_fail": 1}


def test_grader_crash_is_an_infra_error_of_the_grader(ray_session, capsys):
    task = load_tasks("builtin", "train")[0]
    lease = SandboxLease(0, SandboxConfig(pool_size=0), "swerve-tests")
    plan = FaultPlan.for_episode(FaultsConfig(grader_crash_rate=1.0), seed=1)
    faulty = plan.wrap_sandbox(lease)
    faulty.start(task)
    faulty.exec("true")  # an ordinary command is not the grader's: nothing is injected
    assert plan.injected["grader_crash"] == 0
    with pytest.raises(InfraError) as err:
        grade(faulty, task, timeout_s=60)
    assert err.value.source == InfraSource.GRADER and plan.injected == {"grader_crash": 1}
    lease.start(task)  # the re-run gets a fresh sandbox actor and is graded normally
    assert grade(lease, task, timeout_s=60).exit_code != 0  # the task's bug is still there
    lease.close()
    show(capsys, "grader crash", f"grader_crash | 1 | {int(err.value.source == InfraSource.GRADER)}")


# make check: a 2-node cluster of its own (70 s); make test's multi-node path is the placement run
# (tests/actors/cluster/test_placement.py), and an episode whose sandbox actor dies is re-run in
# tests/actors/fleet/test_supervisor.py.
@pytest.mark.check
def test_removed_node_costs_episodes_not_the_run(tmp_path, swerve_cache, capsys):
    run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), swerve_cache, "3"], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    acc = report["accounting"]
    show(capsys, "node removal", f"node_removed | {report['nodes_removed']} | "
         f"{int(acc['infra_excluded'] >= 1 and acc['identity_holds'])} (infra_excluded={acc['infra_excluded']})")
    assert report["nodes_removed"] == 1 and report["sandboxes_on_removed_node"] >= 1
    # Episode actors that lived on the removed node were replaced (their work re-run), never fatal.
    on_removed = sum(node != report["head_node"] for node in report["episode_nodes"])
    assert acc["episode_replacements"] >= (1 if on_removed else 0)
    assert acc["admitted"] == sum(acc[k] for k in IDENTITY) and acc["in_flight"] == 0
    assert acc["infra_excluded"] >= 1 and acc["quarantined"] == 0
