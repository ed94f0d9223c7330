"""`swerve tasks ...`: inspect and check task sets.

    swerve tasks list     [--source SRC] [--format F] [--split S|all] [--json] [--config PATH] [key=value ...]
    swerve tasks validate [--source SRC] [--format F] [--split S|all] [--timeout-s T] [--config PATH] [key=value ...]
    swerve tasks synth    --repo PATH --out FILE -n N [--seed S] [--timeout-s T]

--source/--format/--split override tasks.source/tasks.format/tasks.split. `validate` runs the
sanity gate (envs/validate.py) in local sandboxes, writes the quarantine file and exits 1 iff
a task was quarantined.
"""
from __future__ import annotations

import argparse
import json
import sys

from configs import ConfigError, load_config
from envs.tasks.synth import cli as synth_cli


def _config(args: argparse.Namespace):
    cfg = load_config(args.config, args.overrides)
    for name in ("source", "format", "split"):
        value = getattr(args, name)
        if value is not None:
            setattr(cfg.tasks, name, value)
    return cfg


def _load(cfg):
    from envs.tasks.loaders import load_task_set

    try:
        task_set = load_task_set(cfg.tasks.source, cfg.tasks.split, cfg.tasks.ids, cfg.tasks.format)
    except (ValueError, ImportError) as error:
        raise ConfigError(f"tasks: {error}") from error
    for row in task_set.skipped:
        print(f"skipped {row}", file=sys.stderr)
    return task_set


def _list(args: argparse.Namespace) -> int:
    cfg = _config(args)
    task_set = _load(cfg)
    for task in task_set.tasks:
        if args.json:
            print(json.dumps({
                "id": task.id, "repo": task.repo, "stratum": task.stratum, "split": task.split,
                "source": task.source, "FAIL_TO_PASS": list(task.fail_to_pass),
                "PASS_TO_PASS": list(task.pass_to_pass), "image": task.image,
                "workspace_dir": task.workspace_dir,
            }))
        else:
            graded = (f"harbor verifier={task.harbor.mode}" if task.harbor is not None
                      else f"F2P={len(task.fail_to_pass)} P2P={len(task.pass_to_pass)}")
            print(f"{task.id}\t{task.repo}\t{task.stratum}\t{task.split}\t{graded}")
    summary = (f"{len(task_set.tasks)} tasks ({cfg.tasks.source}, split {cfg.tasks.split}), "
               f"{len(task_set.skipped)} rows skipped")
    print(summary, file=sys.stderr if args.json else sys.stdout)
    return 0


def _validate(args: argparse.Namespace) -> int:
    import dataclasses

    from actors.episodes.sandbox_actor import SANDBOX_BACKENDS
    from envs.validate import OK, QUARANTINED, SKIPPED, quarantine_path, validate_task, write_quarantine

    if args.split is None and not any(o.startswith("tasks.split=") for o in args.overrides):
        args.split = "all"  # the gate checks a whole source unless told otherwise
    cfg = _config(args)
    task_set = _load(cfg)
    # The limit training grades with, so the gate passes exactly the tasks a run can grade.
    timeout_s = cfg.env.swe.grade_timeout_s if args.timeout_s is None else args.timeout_s
    # The configured backend (sandbox.backend=docker runs image tasks), one fresh lease per check.
    backend, sandbox_cfg = SANDBOX_BACKENDS[cfg.sandbox.backend], dataclasses.replace(cfg.sandbox, pool_size=0)
    runs_images = backend.backend_cls.runs_images
    header = ("id", "repo", "gold", "empty", "verdict", "reason", "seconds")
    print("\t".join(header), flush=True)
    results = []
    for task in task_set.tasks:
        result = validate_task(task, lambda: backend(sandbox_cfg), timeout_s, cfg.env.swe.listing_timeout_s,
                               sandbox_cfg, runs_images=runs_images)
        results.append(result)
        cells = (result.task_id, result.repo, _yes_no(result.gold_resolved), _yes_no(result.empty_resolved),
                 result.verdict, result.reason or "-", f"{result.seconds:.1f}")
        print("\t".join(cells), flush=True)
    count = {v: sum(r.verdict == v for r in results) for v in (OK, QUARANTINED, SKIPPED)}
    repos = len({task.repo for task in task_set.tasks})
    path = quarantine_path(cfg.tasks)
    all_quarantined = write_quarantine(path, cfg.tasks.source, results)
    print(f"{len(results)} tasks from {repos} repos: {count[OK]} ok, {count[QUARANTINED]} quarantined, "
          f"{count[SKIPPED]} skipped" + (" (needs container backend: sandbox.backend=docker)" if count[SKIPPED] else "")
          + (f"; {len(task_set.skipped)} malformed rows skipped" if task_set.skipped else ""))
    print(f"quarantine file: {path} ({len(all_quarantined)} tasks listed)")
    return 1 if count[QUARANTINED] else 0


def _yes_no(value) -> str:
    return "-" if value is None else ("resolved" if value else "unresolved")


def _task_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--source", help="'builtin', 'micro' or a path to a task file/directory (overrides tasks.source)")
    p.add_argument("--format", help="swebench | swesmith | harbor | builtin | micro; default: detect (overrides tasks.format)")
    p.add_argument("--split", help="split to select, or 'all' (overrides tasks.split)")
    return p


def register(sub: argparse._SubParsersAction, with_config) -> None:
    tasks = sub.add_parser("tasks", help="inspect task sets").add_subparsers(dest="tasks_command", required=True)
    listing = _task_args(with_config(tasks.add_parser("list", help="list the configured tasks")))
    listing.add_argument("--json", action="store_true", help="one JSON object per task per line")
    listing.set_defaults(func=_list)
    check = _task_args(with_config(tasks.add_parser(
        "validate", help="sanity gate: gold patch resolves, empty patch does not; writes the quarantine file")))
    check.add_argument("--timeout-s", type=float, default=None,
                       help="time limit of each test run in seconds (default: env.swe.grade_timeout_s)")
    check.set_defaults(func=_validate)
    synth = tasks.add_parser("synth", help="make SWE-smith-style tasks from a local Python repository with pytest tests")
    synth_cli.add_arguments(synth)
    synth.set_defaults(func=synth_cli.run)
