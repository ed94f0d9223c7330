"""``swerve tasks synth``: make SWE-smith-style bug tasks from a local Python repository.

    swerve tasks synth --repo PATH --out tasks.jsonl -n 20 --seed 0 --timeout-s 1800

Writes one JSON row per kept task (SWE-smith format plus repo_path/family/stratum/split and
hidden_cases), prints a table (id, family, file, #F2P, #P2P) and summary lines.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from configs.schema import SynthConfig
from envs.tasks.synth.injector import SynthError, synthesize
from envs.tasks.synth.mutators import FAMILIES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = SynthConfig()
    parser.add_argument("--repo", required=True, help="local Python repository with pytest tests")
    parser.add_argument("--out", required=True, help="output JSONL file (SWE-smith rows)")
    parser.add_argument("-n", "--n", dest="n", type=int, default=defaults.num_tasks, help="tasks to keep")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--timeout-s", dest="timeout_s", type=float, default=defaults.timeout_s,
                        help="bound on the whole synthesis (baseline runs included)")
    parser.add_argument("--per-run-timeout-s", dest="per_run_timeout_s", type=float,
                        default=defaults.per_run_timeout_s,
                        help=f"bound on one test run (0: {defaults.run_timeout_factor:g}x the baseline run "
                             f"+ {defaults.run_timeout_margin_s:g} s)")
    parser.add_argument("--max-p2p", dest="max_p2p", type=int, default=defaults.max_p2p)
    parser.add_argument("--families", default=",".join(defaults.families),
                        help="comma-separated subset of: " + ",".join(FAMILIES) + " (default: all)")
    parser.add_argument("--python", default=defaults.python,
                        help="interpreter that runs the repo's tests (default: this one)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args: argparse.Namespace) -> int:
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        print(f"unknown families: {', '.join(unknown)} (known: {', '.join(FAMILIES)})", file=sys.stderr)
        return 2
    cfg = SynthConfig(num_tasks=args.n, seed=args.seed, timeout_s=args.timeout_s,
                      per_run_timeout_s=args.per_run_timeout_s, max_p2p=args.max_p2p, families=families,
                      python=args.python)
    stats: dict = {}
    log = None if args.quiet else (lambda m: print(f"[synth] {m}", file=sys.stderr))
    try:
        rows = synthesize(args.repo, cfg, stats=stats, log=log)
    except SynthError as exc:
        print(f"synth failed: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    print(format_table(rows))
    rejected = ", ".join(f"{k}={v}" for k, v in sorted(stats.get("rejected", {}).items()))
    print(f"candidates: {stats.get('candidates', 0)}  tried: {stats.get('tried', 0)}  "
          f"kept: {len(rows)}  seconds: {stats.get('seconds', 0.0):.1f}  "
          f"baseline passing tests: {stats.get('baseline_passed', 0)}"
          + (f"  rejected: {rejected}" if rejected else ""))
    no_hidden = ", ".join(f"{k}={v}" for k, v in sorted(stats.get("no_hidden_cases", {}).items()))
    print(f"with hidden cases: {stats.get('with_hidden_cases', 0)} of {len(rows)}  "
          f"replayable recorded calls: {stats.get('replayable_calls', 0)} of {stats.get('recorded_calls', 0)}"
          + (f"  without: {no_hidden}" if no_hidden else ""))
    print(f"wrote {len(rows)} rows to {out}")
    return 0 if rows else 1


def format_table(rows: list[dict]) -> str:
    header = ("id", "family", "file", "#F2P", "#P2P")
    body = [(r["instance_id"], r["family"], r.get("file", ""), str(len(r["FAIL_TO_PASS"])),
             str(len(r["PASS_TO_PASS"]))) for r in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *body)]
    fmt = "  ".join(f"{{:<{w}}}" if i < 3 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*header)] + [fmt.format(*r) for r in body])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="swerve tasks synth", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
