"""`swerve` command line (also `python -m actors`)."""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Iterator

from actors.cli import tasks_cli, view_cli
from actors.report import console
from configs import ConfigError, load_config
from configs.schema.engine import REQUEST_LOG_LEVELS
from policies.server.options import DEFAULT_PORT


@contextlib.contextmanager
def command_session(run_path: Path, verbose: bool) -> Iterator[console.Console]:
    """A command's console; a Ray that the command started or joined is left before the console's
    last lines, because Ray prints its held-back worker notices ("[repeated 2x across cluster]") as
    it disconnects: inside the session they land in the log, after it they would follow the line
    that names the run's page. A Ray already up in this process (a test's) is the caller's own."""
    ray_was_up = _ray_is_up()
    with console.session(run_path / "logs", verbose) as session:
        try:
            yield session
        finally:
            if not ray_was_up and _ray_is_up():
                sys.modules["ray"].shutdown()


def _ray_is_up() -> bool:
    ray = sys.modules.get("ray")  # never imported: never started (and `swerve --help` stays fast)
    return ray is not None and ray.is_initialized()


def _train(args: argparse.Namespace) -> int:
    from actors.stages.driver import train

    cfg = load_config(args.config, [*args.overrides, *(["run.resume=true"] if args.resume else [])])
    with command_session(cfg.run.path, args.verbose):
        path = train(cfg)
        console.say(f"done: {path}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    """A standalone CPU engine on 127.0.0.1 (SGLang's native API and the OpenAI-compatible
    /v1/chat/completions, /v1/models) for the configured model, or --model DIR."""
    from actors.stages.policy_setup import ensure_policy
    from policies.server.app import configure_logging, serve
    from policies.server.options import engine_server_config

    cfg = load_config(args.config, [*args.overrides, *([f"model.path={args.model}"] if args.model else []),
                                    *([f"engine.request_log_level={args.request_log_level}"]
                                      if args.request_log_level else [])])
    configure_logging("info")  # each request's line shows at engine.request_log_level info or above
    _, model_path = ensure_policy(cfg)
    print(f"[swerve] serving {model_path} on http://127.0.0.1:{args.port} "
          f"(OpenAI-compatible: http://127.0.0.1:{args.port}/v1)", flush=True)
    serve(engine_server_config(model_path, cfg.engine, host="127.0.0.1", port=args.port))
    return 0


def _sft(args: argparse.Namespace) -> int:
    """Supervised fine-tuning on OpenAI-style `messages` traces; writes an HF model directory."""
    from actors.stages.policy_setup import ensure_policy
    from policies.training.sft import run_sft

    overrides = [*args.overrides, *([f"sft.data={args.data}"] if args.data else []),
                 *([f"sft.out_dir={args.out}"] if args.out else [])]
    cfg = load_config(args.config, overrides)
    if not cfg.sft.data or not cfg.sft.out_dir:
        raise ConfigError("sft needs --data FILE (sft.data) and --out DIR (sft.out_dir)")
    tokenizer_path, model_path = ensure_policy(cfg)
    summary = run_sft(model_path, tokenizer_path, cfg.sft.data, cfg.sft.out_dir, cfg.sft)
    print(f"[swerve] sft done: {cfg.sft.out_dir} (use model.path={cfg.sft.out_dir}); "
          f"loss {summary['losses'][0]:.3f} -> {summary['losses'][-1]:.3f}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    """pass@k of the policy (model.path) on a stratified subset of tasks; writes eval.json."""
    from actors.stages.evaluate import evaluate, table

    cfg = load_config(args.config, args.overrides)
    with command_session(cfg.run.path, args.verbose):
        report = evaluate(cfg)
        console.say(table(report))
        console.say(f"eval done: {report['out_dir']}/eval.json, predictions.jsonl")
    return 0


def _pipeline(args: argparse.Namespace) -> int:
    from actors.stages.pipeline import run_pipeline

    cfg = load_config(args.config, args.overrides)
    with command_session(cfg.run.path, args.verbose):
        run_pipeline(cfg)
    return 0


def _status(args: argparse.Namespace) -> int:
    from actors.cli.status import main_status

    return main_status(load_config(args.config, args.overrides), args.address, args.json)


def _plan(args: argparse.Namespace) -> int:
    from actors.cluster.placement_plan import build_plan, format_plan

    plan = build_plan(load_config(args.config, args.overrides), args.mode)
    print(json.dumps(plan, indent=1) if args.json else format_plan(plan))
    return 0


def _bench(args: argparse.Namespace) -> int:
    from bench.registry import run_benchmark

    result = run_benchmark(args.name, load_config(args.config, args.overrides), args.repetitions)
    print(f"[swerve] bench {result['name']}: {result['figure']} = {result['ratio']:.3g} "
          f"(target {result['target']}: {'met' if result['met'] else 'NOT met'}) -> bench/results/{result['name']}.json")
    return 0


def _tito_check(args: argparse.Namespace) -> int:
    """Whether a chat template renders conversations incrementally exactly as in one piece."""
    from policies.chat.tito_check import main as tito_check

    tokenizer_dir = args.tokenizer
    if not tokenizer_dir:  # the configured tokenizer: tokenizer.path, or the embedded one built for the run
        from actors.stages.policy_setup import ensure_run_tokenizer

        tokenizer_dir = ensure_run_tokenizer(load_config(args.config, args.overrides))
    return tito_check(tokenizer_dir, args.chat_template, args.json)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="swerve", description="Asynchronous RL for software-engineering agents.")
    sub = top.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--config", help="YAML file of overrides (e.g. configs/default.yaml)")
        p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. trainer.total_steps=3")
        return p

    def a_run(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--verbose", action="store_true",
                       help="print everything (Ray's and the actors' output, each step's status) instead of "
                            "one progress line per stage; without it the rest is in runs/NAME/logs/console.log")
        return with_config(p)

    train = a_run(sub.add_parser("train", help="run the asynchronous training loop"))
    train.add_argument("--resume", action="store_true", help="continue from the run's newest checkpoint")
    train.set_defaults(func=_train)
    sft = with_config(sub.add_parser("sft", help="supervised fine-tuning on `messages` traces (JSONL)"))
    sft.add_argument("--data", help="traces file (sft.data)")
    sft.add_argument("--out", help="output HF model directory (sft.out_dir)")
    sft.set_defaults(func=_sft)
    evaluate = a_run(sub.add_parser("eval", help="pass@k on a stratified task subset; writes eval.json"))
    evaluate.set_defaults(func=_eval)
    a_run(sub.add_parser("pipeline", help="base eval -> SFT on expert traces -> async GRPO -> eval")
                ).set_defaults(func=_pipeline)
    status = with_config(sub.add_parser("status", help="live books of a running job (run.name=NAME)"))
    status.add_argument("--address", default="", help="Ray cluster address (default: RAY_ADDRESS or auto)")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(func=_status)
    serve = with_config(sub.add_parser("serve", help="run a standalone CPU engine (SGLang's native HTTP API and "
                                                     "OpenAI's /v1/chat/completions)"))
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="port on 127.0.0.1 (0 picks a free one)")
    serve.add_argument("--model", default="", help="a model directory to serve, e.g. runs/NAME/policy "
                                                   "(model.path; default: the configured model)")
    serve.add_argument("--request-log-level", choices=REQUEST_LOG_LEVELS, default="",
                       help="the level of each request's log line: method, path, status, tokens, time "
                            "(engine.request_log_level, default info: shown; debug: hidden; off: none)")
    serve.set_defaults(func=_serve)
    plan = with_config(sub.add_parser("plan", help="what a run would start where: roles, nodes, GPUs, limits"))
    plan.add_argument("--mode", choices=("train", "eval"), default="train")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON (for scripts)")
    plan.set_defaults(func=_plan)
    tito = with_config(sub.add_parser("tito-check", help="does a chat template render multi-turn conversations "
                                                         "(tool calls, developer role, reasoning) incrementally "
                                                         "exactly as in one piece? exit 0 if so, 1 if not"))
    tito.add_argument("--tokenizer", default="", help="a tokenizer directory (tokenizer.json and a chat template); "
                                                      "default: the configured tokenizer")
    tito.add_argument("--chat-template", default="", help="check this jinja file instead of the directory's "
                                                          "template, or `qwen3-style` for a built-in Qwen3-like one")
    tito.add_argument("--json", action="store_true", help="print one JSON object")
    tito.set_defaults(func=_tito_check)
    from bench.registry import BENCHMARKS

    bench = sub.add_parser("bench", help="run one benchmark; writes bench/results/NAME.json")
    bench.add_argument("name", help="one of: " + " | ".join(sorted(BENCHMARKS)))
    with_config(bench)
    bench.add_argument("--repetitions", type=int, default=3, help="median over this many runs")
    bench.set_defaults(func=_bench)
    tasks_cli.register(sub, with_config)
    view_cli.register(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    from actors.report import redact

    redact.install()  # every command's logs and prints, before anything can print a secret
    top = parser()
    args, extra = top.parse_known_args(argv)
    # key=value overrides may come after options (`swerve bench NAME --repetitions 3 k=v`).
    stray = [a for a in extra if a.startswith("-") or "=" not in a]
    if stray or (extra and not hasattr(args, "overrides")):
        top.error(f"unrecognized arguments: {' '.join(stray or extra)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    try:
        return args.func(args)
    except ConfigError as err:
        print(f"swerve: config error: {err}", file=sys.stderr)
        return 2
