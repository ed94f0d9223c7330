"""What one CPU server is started with: `ServerConfig`, and the `python -m policies.server` flags.

Engine settings default to configs.schema.EngineConfig's (the one home of engine defaults), so a
server started by hand behaves as one an engine actor starts (policies/engines/process.py).
Names follow SGLang's where it has the same setting (--context-length, --max-running-requests).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from configs.schema import EngineConfig
from configs.schema.engine import REQUEST_LOG_LEVELS
from policies.engines.process import ENGINE_HOST

# SGLang's default port; engine actors always pass a free one.
DEFAULT_PORT = 30000


@dataclass
class ServerConfig:
    model_path: str
    host: str = ENGINE_HOST
    port: int = DEFAULT_PORT
    max_batch_size: int = EngineConfig.max_batch_size
    max_context_tokens: int = EngineConfig.max_context_tokens
    # KV-token pool and per-step prefill budget; None: the scheduler sizes them from the above.
    max_total_tokens: Optional[int] = None
    max_prefill_tokens: Optional[int] = None
    weight_version: str = "0"
    torch_threads: int = EngineConfig.torch_threads
    # KV of finished requests kept for their conversation's next turn (0: no prefix cache).
    prefix_cache_tokens: int = EngineConfig.prefix_cache_tokens
    # SGLang's --enable-priority-scheduling: requests' `priority` orders the queue (larger first)
    # and a full batch yields its lowest row to a request higher by more than the threshold.
    enable_priority_scheduling: bool = False
    priority_scheduling_preemption_threshold: int = EngineConfig.priority_preemption_threshold
    # The level of each request's log line (policies/server/wire_http.py; "off": none).
    request_log_level: str = EngineConfig.request_log_level


def engine_server_config(model_path: str, engine: EngineConfig, host: str = ENGINE_HOST,
                         port: int = DEFAULT_PORT) -> ServerConfig:
    """The server an engine of this config runs (`swerve serve`)."""
    return ServerConfig(model_path=model_path, host=host, port=port, max_batch_size=engine.max_batch_size,
                        max_context_tokens=engine.max_context_tokens, torch_threads=engine.torch_threads,
                        prefix_cache_tokens=engine.prefix_cache_tokens,
                        enable_priority_scheduling=engine.priority == "age",
                        priority_scheduling_preemption_threshold=engine.priority_preemption_threshold,
                        request_log_level=engine.request_log_level)


def build_arg_parser() -> argparse.ArgumentParser:
    defaults = ServerConfig(model_path="")
    parser = argparse.ArgumentParser(
        prog="python -m policies.server",
        description="swerve CPU inference server (a subset of SGLang's native HTTP API)")
    parser.add_argument("--model-path", required=True, help="Hugging Face model directory")
    parser.add_argument("--host", default=defaults.host)
    parser.add_argument("--port", type=int, default=defaults.port, help="0 picks a free port")
    parser.add_argument("--max-batch-size", "--max-running-requests", dest="max_batch_size",
                        type=int, default=defaults.max_batch_size)
    parser.add_argument("--max-context-tokens", "--context-length", dest="max_context_tokens",
                        type=int, default=defaults.max_context_tokens)
    parser.add_argument("--max-total-tokens", type=int, default=defaults.max_total_tokens,
                        help="KV-token pool (default max_batch_size * max_context_tokens)")
    parser.add_argument("--max-prefill-tokens", "--chunked-prefill-size",
                        dest="max_prefill_tokens", type=int, default=defaults.max_prefill_tokens)
    parser.add_argument("--weight-version", default=defaults.weight_version)
    parser.add_argument("--torch-threads", type=int, default=defaults.torch_threads)
    parser.add_argument("--prefix-cache-tokens", type=int, default=defaults.prefix_cache_tokens,
                        help="KV tokens of finished requests kept for the next turn (0: off; "
                             "SGLang's radix cache plays this part)")
    parser.add_argument("--enable-priority-scheduling", action="store_true",
                        help="serve larger `priority` first (SGLang's flag); off: arrival order")
    parser.add_argument("--priority-scheduling-preemption-threshold", type=int,
                        default=defaults.priority_scheduling_preemption_threshold)
    parser.add_argument("--request-log-level", choices=REQUEST_LOG_LEVELS, default=defaults.request_log_level,
                        help="the level of the one log line each request gets (method, path, status, tokens, "
                             "time); shown when --log-level lets it through; off: no line")
    parser.add_argument("--log-level", default="warning")
    return parser


def parse_args(argv: Optional[Sequence[str]] = None) -> Tuple[ServerConfig, str]:
    """(the server's config, the log level) from the command line."""
    args = vars(build_arg_parser().parse_args(argv))
    log_level = args.pop("log_level")
    return ServerConfig(**args), log_level
