"""`swerve` command line (also `python -m actors`)."""
from __future__ import annotations

import argparse
import sys

from configs import ConfigError, load_config


def _train(args: argparse.Namespace) -> int:
    from actors.driver import train

    cfg = load_config(args.config, args.overrides)
    path = train(cfg)
    print(f"[swerve] done: {path}")
    return 0


def _tasks_list(args: argparse.Namespace) -> int:
    from envs.tasks import load_tasks

    cfg = load_config(args.config, args.overrides)
    tasks = load_tasks(cfg.tasks.source, cfg.tasks.split, cfg.tasks.ids)
    for task in tasks:
        print(f"{task.id}\t{task.repo}\t{task.stratum}\tF2P={len(task.fail_to_pass)} P2P={len(task.pass_to_pass)}")
    print(f"{len(tasks)} tasks ({cfg.tasks.source}, split {cfg.tasks.split})")
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="swerve", description="Asynchronous RL for software-engineering agents.")
    sub = top.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--config", help="YAML file of overrides (e.g. configs/default.yaml)")
        p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. trainer.total_steps=3")
        return p

    with_config(sub.add_parser("train", help="run the asynchronous training loop")).set_defaults(func=_train)
    tasks = sub.add_parser("tasks", help="inspect task sets").add_subparsers(dest="tasks_command", required=True)
    with_config(tasks.add_parser("list", help="list the configured tasks")).set_defaults(func=_tasks_list)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as err:
        print(f"swerve: config error: {err}", file=sys.stderr)
        return 2
