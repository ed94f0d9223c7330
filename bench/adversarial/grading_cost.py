"""`swerve bench grading`: what a verdict costs, and what `env.swe.grade_isolation=per_test` adds.

Two task shapes, each graded with its gold fix applied: the built-in textkit-003 (three listed
tests, hidden cases) and the same task made SWE-bench-shaped (bench/adversarial/red_team_targets.py:
a git repository whose tests arrive as a test_patch). Each repetition grades both in "suite" (the
baseline: one pytest process) and "per_test" (one pytest process per listed test) on one local
lease; the figure is per_test's median wall time over suite's, per shape. The host's side is
reported beside it: CPU seconds of this process (the grader's parsing and the sandbox's host
work) per grading, and the process's peak RSS.
"""
from __future__ import annotations

import resource
import statistics
import tempfile
import time
from pathlib import Path

from bench.adversarial.red_team_targets import targets
from configs import Config
from envs.grading.grader import grade
from envs.sandboxes.local_sandbox import LocalSandbox

SHAPES = ("builtin", "swebench")
ISOLATIONS = ("suite", "per_test")
# per_test starts a pytest per listed test; what it may cost before it is not worth offering.
TARGET_RATIO = 4.0


def _graded_s(sandbox: LocalSandbox, target, isolation: str, timeout_s: float) -> tuple[float, float]:
    """(wall s, host CPU s) of grading the gold fix; raises if the gold fix does not resolve."""
    sandbox.reset()
    applied = sandbox.exec(target.fix_command)
    if applied.exit_code != 0:
        raise RuntimeError(f"the gold fix of {target.task.id} does not apply: {applied.output[-300:]}")
    cpu_before = time.process_time()
    started = time.perf_counter()
    result = grade(sandbox, target.task, timeout_s, isolation, changed=(target.source,))
    wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_before
    if not result.resolved:
        raise RuntimeError(f"the gold fix of {target.task.id} did not resolve under {isolation}: {result.problems}")
    return wall_s, cpu_s


def grading_cost(cfg: Config, repetitions: int) -> dict:
    timeout_s = cfg.env.swe.grade_timeout_s
    times: dict = {shape: {isolation: [] for isolation in ISOLATIONS} for shape in SHAPES}
    cpu: dict = {shape: {isolation: [] for isolation in ISOLATIONS} for shape in SHAPES}
    with tempfile.TemporaryDirectory(prefix="swerve-bench-grading-") as work:
        shapes = targets(Path(work))
        sandbox = LocalSandbox(cfg.sandbox)
        try:
            for shape in SHAPES:
                sandbox.start(shapes[shape].task)
                for _ in range(repetitions):
                    for isolation in ISOLATIONS:  # interleaved: drift on a busy machine hits both
                        wall_s, cpu_s = _graded_s(sandbox, shapes[shape], isolation, timeout_s)
                        times[shape][isolation].append(wall_s)
                        cpu[shape][isolation].append(cpu_s)
        finally:
            sandbox.close()
    median = {shape: {isolation: statistics.median(times[shape][isolation]) for isolation in ISOLATIONS}
              for shape in SHAPES}
    ratios = {shape: median[shape]["per_test"] / median[shape]["suite"] for shape in SHAPES}
    worst = max(ratios.values())
    return {
        "figure": "per_test / suite grading wall time (worst shape)", "ratio": worst,
        "target": f"<= {TARGET_RATIO}", "met": worst <= TARGET_RATIO, "bound": None,
        "baseline": median["builtin"]["suite"],
        "details": {"median_s": median, "ratios": ratios, "tests_listed": {
                        shape: len(set(shapes[shape].task.fail_to_pass + shapes[shape].task.pass_to_pass))
                        for shape in SHAPES},
                    "host_cpu_s_median": {shape: {i: statistics.median(cpu[shape][i]) for i in ISOLATIONS}
                                          for shape in SHAPES},
                    "host_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                    "runs_s": times},
    }
