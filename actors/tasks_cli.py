"""`swerve tasks ...`: inspect task sets."""
from __future__ import annotations

import argparse

from configs import load_config


def _list(args: argparse.Namespace) -> int:
    from envs.tasks import load_tasks

    cfg = load_config(args.config, args.overrides)
    tasks = load_tasks(cfg.tasks.source, cfg.tasks.split, cfg.tasks.ids)
    for task in tasks:
        print(f"{task.id}\t{task.repo}\t{task.stratum}\tF2P={len(task.fail_to_pass)} P2P={len(task.pass_to_pass)}")
    print(f"{len(tasks)} tasks ({cfg.tasks.source}, split {cfg.tasks.split})")
    return 0


def register(sub: argparse._SubParsersAction, with_config) -> None:
    tasks = sub.add_parser("tasks", help="inspect task sets").add_subparsers(dest="tasks_command", required=True)
    with_config(tasks.add_parser("list", help="list the configured tasks")).set_defaults(func=_list)
