"""Inference engines (actors/engines/engine_actor.py, policies/server/)."""
from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Collection, List, Literal


@dataclass
class SimEngineConfig:
    """engine.backend=sim: an engine that costs time, not compute (benchmarks of the control plane).

    A decode step of b running requests takes step_base_s + step_per_request_s * b, as a real
    engine's does (a fixed cost per step plus a per-sequence one), so batching pays and a batch
    that drains in the tail runs nearly idle. Its replies are a scripted agent's: each trajectory
    draws a plan at its first turn (turns, tokens per turn) and carries it in its replies.
    The defaults are `swerve bench async_vs_sync`'s reference workload (with rollout.max_turns=10)."""
    step_base_s: float = 0.003
    step_per_request_s: float = 0.0005
    # Share of trajectories that never submit (they end at rollout.max_turns).
    cap_fraction: float = 0.84
    # The others submit at a turn drawn uniformly from [submit_turn_min, submit_turn_max].
    submit_turn_min: int = 6
    submit_turn_max: int = 10
    # Tokens per reply, drawn once per trajectory: "uniform" in [min, max], or "pareto" (shape
    # tokens_pareto_shape, scale min, cut at max) for a heavy tail of long trajectories.
    tokens_per_turn_min: int = 24
    tokens_per_turn_max: int = 60
    tokens_distribution: Literal["uniform", "pareto"] = "uniform"
    tokens_pareto_shape: float = 1.5
    # The command each non-final turn runs in the sandbox.
    command: str = "ls"
    # Decoding pauses this long while new weights load.
    weight_update_s: float = 0.0


# Engine backends: "cpu" our server (python -m policies.server); "sglang" a real SGLang server
# (GPU); "sim" a simulated engine in the actor itself (engine.sim; benchmarks). Each has its
# server command in policies/engines/process.py SERVER_COMMANDS and its actor class in
# actors/fleet/remote.py REMOTE_ENGINES ("sim" has no server); both check themselves against this
# list when imported (check_backend_registry).
# engine.request_log_level: the level of the CPU server's per-request log line ("off": none).
RequestLogLevel = Literal["debug", "info", "warning", "error", "off"]
REQUEST_LOG_LEVELS: tuple[str, ...] = typing.get_args(RequestLogLevel)
EngineBackend = Literal["cpu", "sglang", "sim"]
ENGINE_BACKENDS: tuple[str, ...] = typing.get_args(EngineBackend)
# The backends that run in their actor, with no server process.
SERVERLESS_BACKENDS = ("sim",)
SERVER_BACKENDS = tuple(b for b in ENGINE_BACKENDS if b not in SERVERLESS_BACKENDS)


def check_backend_registry(registry: Collection[str], where: str, backends: Collection[str] = ENGINE_BACKENDS) -> None:
    """Raise unless `registry` (keyed by engine.backend) has an entry for each of `backends` and
    no other. Each registry calls it where it is built, so a backend added to EngineBackend
    without its server command or actor class (or one left behind after its removal) fails at
    the first import, in every test, instead of in the first run that picks it."""
    missing = [b for b in backends if b not in registry]
    unknown = [str(k) for k in registry if k not in backends]
    if missing or unknown:
        problems = [f"no entry for {', '.join(missing)}"] if missing else []
        problems += [f"an entry for {', '.join(unknown)}, not one of them"] if unknown else []
        raise RuntimeError(f"{where} must have an entry for each of {', '.join(backends)} (engine.backend, "
                           f"configs/schema/engine.py EngineBackend), but it has {' and '.join(problems)}")


@dataclass
class EngineConfig:
    """Engine settings, and the defaults of the CPU server's flags (policies/server/options.py)."""
    backend: EngineBackend = "cpu"
    num_engines: int = 2
    # Most requests the server decodes at once (CPU server: --max-running-requests).
    max_batch_size: int = 16
    # Per-request cap on prompt + generated tokens (SGLang --context-length): a request at the
    # cap ends with finish reason "length", so one runaway request cannot starve the others.
    max_context_tokens: int = 4096
    torch_threads: int = 1
    # backend cpu: KV tokens of finished requests the server keeps so a conversation's next turn
    # prefills only its new tokens (8 KiB a token for the embedded default's model; 0: off).
    # SGLang's radix cache does this on its own.
    prefix_cache_tokens: int = 16384
    # SGLang --mem-fraction-static and --tp-size (backend sglang).
    mem_fraction: float = 0.85
    tp_size: int = 1
    # How in-flight requests are held during a weight update when the server tags every token
    # with its version (ours; SGLang >= 0.5.23 with its weight_versions spans): "retract" (KV
    # recomputed with the new weights) or "in_place" (KV kept). Servers without per-token
    # versions (older SGLang) are paused with "abort" and each request resumes from its partial
    # output, so versions stay exact.
    pause_mode: Literal["retract", "in_place"] = "retract"
    # Which requests an engine serves first when it cannot serve all: "fifo" arrival order;
    # "age" (straggler-first) the oldest trajectories (the policy version of their oldest token,
    # then their start time), so the ones that hold a batch back at the staleness bound finish
    # sooner. SGLang: --enable-priority-scheduling and each request's `priority` (larger first).
    # fifo is the default because age did not pay here: in 3 paired runs of `swerve bench
    # async_vs_sync` (staleness 2) age reached 0.876 of the ideal bound on the reference
    # workload against fifo's 0.915, and 0.784 against 0.770 on heavy_tail (within noise).
    priority: Literal["age", "fifo"] = "fifo"
    # backend cpu: a waiting request preempts the lowest-priority running one when the batch is
    # full and its priority is higher by more than this (SGLang's flag of the same name). Age
    # priorities differ by 10 per second of start time and by far more per policy version.
    priority_preemption_threshold: int = 10
    # Where weight updates are written as safetensors for /update_weights_from_disk;
    # empty: /dev/shm when writable, else the system temporary directory.
    weights_dir: str = ""
    # Bounded wait for the server's /health after it starts.
    startup_timeout_s: float = 300.0
    # Client-side limit on one HTTP call to the server (a generation included).
    request_timeout_s: float = 3600.0
    # How often the driver checks that every engine is alive (dead ones are replaced).
    health_interval_s: float = 2.0
    # Concurrent calls one engine actor takes (Ray threads; each waits on the server).
    max_concurrency: int = 1024
    # Extra command-line arguments for the server process.
    server_args: List[str] = field(default_factory=list)
    # backend cpu (and `swerve serve`, its --request-log-level): the level at which the server logs one line
    # per HTTP request (method, path, status, prompt and completion tokens, seconds; an error's code and
    # message), through Python logging (logger `swerve.requests`); "off": no line. `swerve serve` shows info
    # and above; an engine's server process (--log-level warning) shows them only at warning or error.
    request_log_level: RequestLogLevel = "info"
    sim: SimEngineConfig = field(default_factory=SimEngineConfig)
