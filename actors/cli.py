"""`swerve` command line (also `python -m actors`)."""
from __future__ import annotations

import argparse
import sys

from actors import tasks_cli
from configs import ConfigError, load_config


def _train(args: argparse.Namespace) -> int:
    from actors.driver import train

    cfg = load_config(args.config, args.overrides)
    path = train(cfg)
    print(f"[swerve] done: {path}")
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="swerve", description="Asynchronous RL for software-engineering agents.")
    sub = top.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--config", help="YAML file of overrides (e.g. configs/default.yaml)")
        p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. trainer.total_steps=3")
        return p

    with_config(sub.add_parser("train", help="run the asynchronous training loop")).set_defaults(func=_train)
    tasks_cli.register(sub, with_config)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as err:
        print(f"swerve: config error: {err}", file=sys.stderr)
        return 2
