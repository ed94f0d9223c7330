"""`make gpu-check`: the one prepared run for a lent GPU machine, and its dry mode here.

    python3 -m bench.gpu_check                   # on the GPU machine (one H100 / H200, no network, no Ray)
    python -m bench.gpu_check --dry-run          # here, on CPU, in seconds (make gpu-check DRY=1)

The parts (bench/gpu_plan.py PARTS, each with its time limit, all within RUN_BUDGET_S < 8 minutes):
install the carried wheels (megatron-core, ...) into a folder on PYTHONPATH; build a ~0.44B Qwen3 with
random weights (policies/model.py); a few Trainer updates with trainer.backend=torch and =megatron;
HF <-> megatron conversion on it; the CPU engine server's decode on CUDA; the GPU-marked tests. The
model parts run in one worker process (bench/gpu_parts.py), restarted for the rest when a part
crashes it or outruns its limit. A failed part is reported with its error and the next one runs;
the exit status is 1 when any failed. The report is DIR/gpu-check.json and DIR/gpu-check.md (the
table, printed too), DIR being --out, else $OUT (the device tool's folder that comes back), else
runs/gpu-check.

The dry mode runs every part at the tiny size on CPU, the worker and pytest under bench/gpu_audit.py
(an import our code makes of a package the GPU machine lacks fails as it would there), checks the
wheels install for the machine's python, and checks the plan: what travels fits 64 MiB and the time
estimate fits the limits. --build-wheelhouse first downloads the wheels (needs PyPI).
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from bench import gpu_plan
from bench.gpu_plan import (DEVICE_PACKAGES, PARTS, ROOT, RUN_BUDGET_S, SIZES, WHEELHOUSE, WHEELS, WORKER_PARTS,
                            normalized, wheel_files)

LIMITS = dict(PARTS)
POLL_S = 0.2
LOG_TAIL_CHARS = 1500


class Clock:
    def __init__(self, budget_s: float):
        self.started, self.budget_s = time.monotonic(), budget_s

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def limit(self, part: str) -> float:
        """A part's time: its own limit, or what is left of the budget when that is less."""
        return max(0.0, min(LIMITS[part], self.budget_s - self.elapsed()))


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-LOG_TAIL_CHARS:] if path.exists() else ""


def _last_line(path: Path) -> str:
    lines = [line for line in _tail(path).splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def install(wheelhouse: Path, site: Path, dry: bool, clock: Clock) -> dict:
    """The carried wheels into `site`; the dry run installs them for the GPU machine's python, to check them."""
    wheels = wheel_files(wheelhouse)
    if not wheels:
        if dry:
            return {"status": "skipped", "reason": f"no wheelhouse at {wheelhouse}: the dry run uses this venv's "
                    "packages (make gpu-check DRY=1 downloads the wheels and checks them)"}
        return {"status": "failed", "error": f"no wheels in {wheelhouse}: run `make gpu-check DRY=1` where PyPI is "
                "reachable and carry runs/gpu-check/wheels (the device tool's carry)"}
    problems = gpu_plan.wheelhouse_problems(wheelhouse)
    if problems:
        return {"status": "failed", "error": "; ".join(problems)}
    target = []
    if dry:
        target = ["--python-version", gpu_plan.DEVICE_PYTHON, "--implementation", "cp", "--only-binary=:all:",
                  *[arg for p in gpu_plan.PIP_PLATFORMS for arg in ("--platform", p)]]
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
               "--disable-pip-version-check", "--target", str(site), *target, *map(str, wheels)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=clock.limit("install"))
    except subprocess.TimeoutExpired:
        return {"status": "failed", "error": f"pip install timed out (limit {LIMITS['install']} s)"}
    if done.returncode:
        return {"status": "failed", "error": f"pip install exited with {done.returncode}: "
                f"{(done.stdout + done.stderr)[-LOG_TAIL_CHARS:]}"}
    python = gpu_plan.DEVICE_PYTHON if dry else sys.version.split()[0]
    return {"status": "ok", "wheels": [w.name for w in wheels], "python": python,
            "wheels_mib": round(sum(w.stat().st_size for w in wheels) / 2**20, 2)}


def audited(command: list[str], out: Path, name: str) -> list[str]:
    """`python -m X ...` run under the import audit with the GPU machine's packages (dry mode)."""
    allow = out / "audit-allowed.json"
    allowed = sorted(DEVICE_PACKAGES | {normalized(w) for w in WHEELS} | {"swerve"})
    allow.write_text(json.dumps({"allowed": allowed, "wheels": list(WHEELS)}))
    return [command[0], "-m", "bench.gpu_audit", "--allow", str(allow), "--record",
            str(out / f"blocked-{name}.json"), *command[2:]]


def run_worker(args, env: dict, report: dict, clock: Clock, worker: str = "bench.gpu_parts") -> None:
    """The model parts in the worker (`python -m worker`, bench/gpu_parts.py's protocol), restarted for
    the rest when one kills it or outruns its limit; a part it never finished is failed with the reason."""
    parts, out = report["parts"], args.out
    results, log = Results(out / "worker.jsonl"), out / "worker.log"
    remaining, launch = list(WORKER_PARTS), 0
    while remaining and clock.limit(remaining[0]) > 0:
        launch += 1
        command = [sys.executable, "-m", worker, "--size", args.size, "--cache", args.cache,
                   "--results", str(results.path), *([] if args.dry_run else ["--require-cuda"]), *remaining]
        if args.dry_run:
            command = audited(command, out, f"worker{launch}")
        with log.open("a") as sink:
            proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        current, deadline, ended_by, progressed = None, 0.0, "", False
        while not ended_by:
            exited = proc.poll() is not None
            for line in results.new_lines():
                if line.get("event") == "device":
                    report["device"] = {k: v for k, v in line.items() if k != "event"}
                elif line.get("event") == "started":
                    current, deadline = line["part"], time.monotonic() + clock.limit(line["part"])
                    progressed = True
                else:
                    name = line.pop("part")
                    parts[name] = {**line, "limit_s": LIMITS[name]}
                    remaining.remove(name)
                    current = None
                    _progress(name, parts[name])
            if exited:
                ended_by = f"the worker exited with status {proc.returncode}"
            elif current and time.monotonic() > deadline:
                ended_by = f"timed out (limit {LIMITS[current]} s, the check's budget {RUN_BUDGET_S} s)"
            elif not current and clock.elapsed() > clock.budget_s:
                ended_by = f"the check's budget of {RUN_BUDGET_S} s ran out"
            else:
                time.sleep(POLL_S)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the worker's own process group (start_new_session)
            proc.wait()
        # The part it was in fails; a worker that started none (an import error) fails every one left.
        for victim in ([current] if current else remaining if not progressed else remaining[:1]):
            parts[victim] = {"status": "failed", "error": f"{ended_by} during this part: {_last_line(log)}",
                             "log_tail": _tail(log), "limit_s": LIMITS[victim]}
            _progress(victim, parts[victim])
        remaining = [name for name in remaining if name not in parts]
    for name in remaining:
        parts[name] = {"status": "failed", "error": f"not run: the check's budget of {RUN_BUDGET_S} s ran out",
                       "limit_s": LIMITS[name]}


class Results:
    """The worker's JSON-lines file, read as it grows (complete lines only)."""

    def __init__(self, path: Path):
        self.path, self.read = path, 0
        path.unlink(missing_ok=True)

    def new_lines(self) -> list[dict]:
        data = self.path.read_bytes() if self.path.exists() else b""
        end = data.rfind(b"\n") + 1
        if end <= self.read:
            return []
        chunk, self.read = data[self.read:end], end
        return [json.loads(line) for line in chunk.decode().splitlines() if line.strip()]


def gpu_test_files() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                  if "pytest.mark.gpu" in p.read_text(errors="replace"))


def gpu_tests(args, env: dict, clock: Clock) -> dict:
    """pytest -m gpu on the files that hold the marker; each test's outcome from its JUnit XML."""
    if importlib.util.find_spec("pytest") is None:
        return {"status": "skipped", "reason": f"pytest is not installed for {sys.executable}"}
    files = gpu_test_files()
    if not files:
        return {"status": "skipped", "reason": "no test file holds pytest.mark.gpu"}
    if clock.limit("gpu_tests") <= 0:
        return {"status": "failed", "error": f"not run: the check's budget of {RUN_BUDGET_S} s ran out"}
    junit, log = args.out / "gpu-tests.xml", args.out / "gpu-tests.log"
    command = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-rs",
               f"--junitxml={junit}", *files]
    if args.dry_run:
        command = audited(command, args.out, "pytest")
    junit.unlink(missing_ok=True)
    with log.open("w") as sink:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=clock.limit("gpu_tests"))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # pytest and what its tests started (its own process group)
            proc.wait()
            return {"status": "failed", "error": f"pytest timed out (limit {LIMITS['gpu_tests']} s): {_last_line(log)}",
                    "files": files}
    tests = _junit_outcomes(junit)
    result = {"files": files, "tests": tests, "exit_code": code,
              "counts": {o: sum(t["outcome"] == o for t in tests) for o in ("passed", "skipped", "failed", "error")}}
    if code != 0:
        return {"status": "failed", "error": f"pytest exited with {code}: {_tail(log)}", **result}
    return {"status": "ok", **result}


def _junit_outcomes(junit: Path) -> list[dict]:
    if not junit.exists():
        return []
    tests = []
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("skipped", "failure", "error"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                message = child.get("message", "")
        tests.append({"id": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome, "message": message})
    return tests


def summary(name: str, part: dict) -> str:
    """A part's figures in one table cell."""
    if part.get("status") == "skipped":
        return part.get("reason", "")
    if "step_s_median" in part:
        loss = part["loss"]
        return (f"step {part['step_s_median']:.3f} s (median after the first), {part['tokens_per_s']:,.0f} tokens/s; "
                f"loss {loss[0]:.5f} -> {loss[-1]:.5f} ({'falling' if part['loss_falling'] else 'not falling'})"
                + (f"; peak {part['peak_gib']} GiB" if part["peak_gib"] is not None else ""))
    figures = {
        "install": lambda p: f"{len(p['wheels'])} wheels, {p['wheels_mib']} MiB, python {p['python']}",
        "model": lambda p: f"{p['parameters'] / 1e6:.1f}M parameters, vocab {p['vocab_size']}, "
                           f"{p['checkpoint_mib']} MiB, built in {p['build_s']} s",
        "conversion": lambda p: f"round trip {'exact' if p['round_trip_exact'] else 'NOT exact'}; log-prob gap "
                                f"{p['logprob_gap']:.1e}, {p['logprob_gap_after_step']:.1e} after a step; to megatron "
                                f"{p['to_megatron_s']} s, to HF {p['to_hf_s']} s",
        "server": lambda p: f"{p['tokens_per_s_alone']:,.0f} tokens/s alone, {p['tokens_per_s_batched']:,.0f} at "
                            f"{p['requests']} requests ({p['decode_step_ms_batched']} ms a step); log-prob gap "
                            f"{p['logprob_gap']:.1e}",
        "gpu_tests": lambda p: ", ".join(f"{n} {o}" for o, n in p["counts"].items() if n) + "".join(
            f"; {t['id'].split('::')[-1]}: {t['message']}" for t in p["tests"] if t["outcome"] == "skipped"),
    }
    try:
        return figures[name](part) if name in figures else ""
    except KeyError:  # a failed part may lack its figures
        return ""


def _progress(name: str, part: dict) -> None:
    detail = summary(name, part) if part["status"] != "failed" else part["error"].splitlines()[0][:300]
    print(f"gpu-check: {name} {part['status']} ({part.get('seconds', 0)} s): {detail}", flush=True)


def table(report: dict) -> str:
    lines = [f"# make gpu-check ({report['mode']}, {report['started']})", ""]
    device = report.get("device", {})
    if device:
        lines += [", ".join(f"{k} {v}" for k, v in device.items()), ""]
    lines += ["| part | status | seconds (limit) | figures | error |", "|---|---|---|---|---|"]
    for name, _ in PARTS:
        part = report["parts"].get(name, {"status": "failed", "error": "not reached"})
        error = part.get("error", "").replace("\n", " ").replace("|", "/")[:200]
        lines.append(f"| {name} | {part['status']} | {part.get('seconds', '')} ({LIMITS[name]:.0f}) | "
                     f"{summary(name, part)} | {error} |")
    lines += ["", f"elapsed {report['elapsed_s']} s of {RUN_BUDGET_S} s; {'OK' if report['ok'] else 'FAILED'}"]
    if "travel" in report:
        t, e = report["travel"], report["estimate"]
        lines += [f"travels: {t['total_mib']} MiB of {t['limit_mib']} (tree {t['tree_mib']}, wheels {t['wheels_mib']}: "
                  f"{t['wheels']})", f"estimate on the GPU at the full size ({e['parameters'] / 1e6:.0f}M parameters): "
                  f"{e['total_s']} s of {e['budget_s']} s {e['parts_s']}" + (f"; over: {e['over']}" if e["over"] else "")]
    blocked = report.get("blocked_imports", [])
    if blocked:
        lines.append("imports refused as on the GPU machine, which lacks them (optional ones; a part that needed "
                     "one failed above): " + "; ".join(f"{b['module']} ({b['importer']})" for b in blocked))
    return "\n".join(lines) + "\n"


def _run_part(report: dict, name: str, run) -> None:
    started = time.monotonic()
    try:
        result = run()
    except Exception as error:  # this part's failure, reported; the check goes on
        result = {"status": "failed", "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
    report["parts"][name] = {**result, "seconds": round(time.monotonic() - started, 2), "limit_s": LIMITS[name]}
    _progress(name, report["parts"][name])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="here, on CPU: the tiny size, the plan's checks")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "runs" / "gpu-check"))
    parser.add_argument("--wheelhouse", type=Path, default=WHEELHOUSE)
    parser.add_argument("--build-wheelhouse", action="store_true", help="download the wheels first (needs PyPI)")
    parser.add_argument("--size", choices=sorted(SIZES), help="default: full, tiny in the dry run")
    args = parser.parse_args(argv)
    args.size = args.size or ("tiny" if args.dry_run else "full")
    args.out.mkdir(parents=True, exist_ok=True)
    for stale in [*args.out.glob("blocked-*.json"), args.out / "worker.log"]:
        stale.unlink(missing_ok=True)
    clock = Clock(RUN_BUDGET_S)
    report: dict = {"mode": "dry-run" if args.dry_run else "gpu", "size": args.size, "budget_s": RUN_BUDGET_S,
                    "started": datetime.datetime.now().isoformat(timespec="seconds"), "parts": {}}
    if args.build_wheelhouse:
        gpu_plan.build_wheelhouse(args.wheelhouse)
    if args.dry_run:
        report["travel"] = gpu_plan.travel(args.wheelhouse)
        report["estimate"] = gpu_plan.check_estimate(SIZES["full"])
    site = Path(tempfile.mkdtemp(prefix="swerve-gpu-site-"))
    args.cache = tempfile.mkdtemp(prefix="swerve-gpu-cache-")
    try:
        _run_part(report, "install", lambda: install(args.wheelhouse, site, args.dry_run, clock))
        # The dry run imports this venv's packages (the wheels are built for the GPU machine's python).
        path = [] if args.dry_run else [str(site)]
        path += [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path),
               "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        try:
            run_worker(args, env, report, clock)
        except Exception as error:  # the runner itself broke: every part it had not finished fails with it
            for name in WORKER_PARTS:
                report["parts"].setdefault(name, {"status": "failed", "error": f"{type(error).__name__}: {error}",
                                                  "traceback": traceback.format_exc(), "limit_s": LIMITS[name]})
        _run_part(report, "gpu_tests", lambda: gpu_tests(args, env, clock))
    finally:
        shutil.rmtree(site, ignore_errors=True)
        shutil.rmtree(args.cache, ignore_errors=True)
    report["blocked_imports"] = [b for f in sorted(args.out.glob("blocked-*.json")) for b in json.loads(f.read_text())]
    report["elapsed_s"] = round(clock.elapsed(), 1)
    report["ok"] = (all(p["status"] != "failed" for p in report["parts"].values())
                    and report.get("travel", {}).get("fits", True) and report.get("estimate", {}).get("fits", True))
    (args.out / "gpu-check.json").write_text(json.dumps(report, indent=1))
    text = table(report)
    (args.out / "gpu-check.md").write_text(text)
    print(text, end="")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
