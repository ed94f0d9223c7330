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


def _serve(args: argparse.Namespace) -> int:
    """A standalone CPU engine on 127.0.0.1 (SGLang's native API) for the configured model."""
    from policies.model import ensure_model
    from policies.server.app import serve
    from policies.tokenizer import ensure_tokenizer

    cfg = load_config(args.config, args.overrides)
    model_path = ensure_model(cfg.model, ensure_tokenizer(cfg.tokenizer))
    print(f"[swerve] serving {model_path} on http://127.0.0.1:{args.port}", flush=True)
    serve(model_path, host="127.0.0.1", port=args.port, max_batch_size=cfg.engine.max_batch_size,
          max_context_tokens=cfg.engine.max_context_tokens, torch_threads=cfg.engine.torch_threads)
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="swerve", description="Asynchronous RL for software-engineering agents.")
    sub = top.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--config", help="YAML file of overrides (e.g. configs/default.yaml)")
        p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. trainer.total_steps=3")
        return p

    with_config(sub.add_parser("train", help="run the asynchronous training loop")).set_defaults(func=_train)
    serve = with_config(sub.add_parser("serve", help="run a standalone CPU engine (SGLang's native HTTP API)"))
    serve.add_argument("--port", type=int, default=30000, help="port on 127.0.0.1 (0 picks a free one)")
    serve.set_defaults(func=_serve)
    tasks_cli.register(sub, with_config)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as err:
        print(f"swerve: config error: {err}", file=sys.stderr)
        return 2
