"""One inference server process: its command line, its port, its life.

`cpu` runs our server (`python -m policies.server`), `sglang` a real SGLang server. The
process lives in its own process group and dies with the thread that started it, so an
engine actor that dies never leaves a server holding a GPU or a port.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from typing import Callable, Optional

from configs.schema import EngineBackend, EngineConfig
from configs.schema.engine import SERVER_BACKENDS, check_backend_registry

LOG_TAIL_CHARS = 4000
# Only the engine's own actor, on the same node, talks to its server: it listens on loopback
# (README "Exposing the dashboard and engines safely" says how to reach one from elsewhere).
ENGINE_HOST = "127.0.0.1"


def free_port(host: str = ENGINE_HOST) -> int:
    """A port the OS just handed out on `host` (free now; the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def weights_root(cfg: EngineConfig) -> str:
    if cfg.weights_dir:
        return os.path.expanduser(cfg.weights_dir)
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def _cpu_command(cfg: EngineConfig, model_path: str, port: int) -> list[str]:
    return [sys.executable, "-m", "policies.server", "--model-path", model_path,
            "--host", ENGINE_HOST, "--port", str(port),
            "--context-length", str(cfg.max_context_tokens),
            "--max-running-requests", str(cfg.max_batch_size),
            "--torch-threads", str(cfg.torch_threads),
            "--prefix-cache-tokens", str(cfg.prefix_cache_tokens),
            "--weight-version", "0", "--request-log-level", cfg.request_log_level, *_priority_flags(cfg)]


def _sglang_command(cfg: EngineConfig, model_path: str, port: int) -> list[str]:
    return [sys.executable, "-m", "sglang.launch_server", "--model-path", model_path,
            "--context-length", str(cfg.max_context_tokens),
            "--mem-fraction-static", str(cfg.mem_fraction), "--tp-size", str(cfg.tp_size),
            "--host", ENGINE_HOST, "--port", str(port), "--weight-version", "0", *_priority_flags(cfg)]


def _priority_flags(cfg: EngineConfig) -> list[str]:
    """engine.priority=age: SGLang's priority scheduling (larger `priority` first, its default
    sense; both servers take the same flags). fifo sends no priorities, so none are enabled."""
    if cfg.priority != "age":
        return []
    return ["--enable-priority-scheduling",
            "--priority-scheduling-preemption-threshold", str(cfg.priority_preemption_threshold)]


# engine.backend -> the command line of its server; every EngineBackend but the serverless ones
# ("sim" runs in its actor) has one, and actors/fleet/remote.py gives each of these an EngineActor.
SERVER_COMMANDS: dict[EngineBackend, Callable[[EngineConfig, str, int], list[str]]] = {
    "cpu": _cpu_command,
    "sglang": _sglang_command,
}
check_backend_registry(SERVER_COMMANDS, "policies/engines/process.py SERVER_COMMANDS", SERVER_BACKENDS)


def server_command(cfg: EngineConfig, model_path: str, port: int) -> list[str]:
    if cfg.backend not in SERVER_COMMANDS:
        raise ValueError(f"engine.backend '{cfg.backend}' has no server; allowed: {', '.join(SERVER_COMMANDS)}")
    return SERVER_COMMANDS[cfg.backend](cfg, model_path, port) + list(cfg.server_args)


def server_env(cfg: EngineConfig, environ: dict) -> dict:
    """The server's environment: the engine's own, whose CUDA_VISIBLE_DEVICES Ray set to the
    engine's GPUs (actors/cluster/placement.py), so SGLang's tensor-parallel ranks take exactly those.
    An sglang server that would see another number of GPUs than engine.tp_size is refused: it
    would either fail later or (no view at all) take GPU 0 of the node, as every other did."""
    if cfg.backend == "sglang":
        visible = [g for g in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
        if len(visible) != cfg.tp_size:
            raise RuntimeError(f"an sglang engine with engine.tp_size={cfg.tp_size} sees GPUs {visible or 'none'} "
                               "(CUDA_VISIBLE_DEVICES): start it through actors/fleet/launch.py, whose placement gives each "
                               "engine its own tp_size GPUs")
    return {**environ, "OMP_NUM_THREADS": str(cfg.torch_threads)}


def _die_with_parent() -> None:
    """preexec_fn: the server gets SIGKILL when the thread that started it exits (the actor dies)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        # No glibc (e.g. musl): close() and the actor's exit still end the server's process group.
        return


class ServerProcess:
    """One server process in its own process group, started from a thread that lives as long
    as this process (so PDEATHSIG fires exactly when the actor's process dies)."""

    def __init__(self, cmd: list[str], log_path: str, env: Optional[dict] = None):
        self.cmd, self.log_path = cmd, log_path
        self.proc: Optional[subprocess.Popen] = None
        started = threading.Event()
        errors: list[BaseException] = []

        def own() -> None:
            try:
                with open(log_path, "ab") as out:
                    self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                 start_new_session=True, preexec_fn=_die_with_parent, env=env)
            except BaseException as err:  # noqa: BLE001 - re-raised in the constructor
                errors.append(err)
                started.set()
                return
            started.set()
            self.proc.wait()

        self._owner = threading.Thread(target=own, name="engine-server-owner", daemon=True)
        self._owner.start()
        started.wait()
        if errors:
            raise errors[0]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stopped(self) -> bool:
        """Stopped by a signal (state T in /proc: SIGSTOP, a debugger): alive but never answering."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
        except OSError:  # no /proc (not Linux) or the process just ended: alive() says which
            return False

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - chars))
                return f.read().decode(errors="replace")
        except OSError:
            return "(no server log)"

    def kill(self, grace_s: float = 5.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=wait_s)
                return
            except subprocess.TimeoutExpired:
                continue


def weights_file_bytes(state_dict: dict) -> bytes:
    """The trainer's side of a disk weight update: the HF state_dict as the bytes of a safetensors
    file. What travels to the engine actors is bytes, so they write it without importing torch
    (~2 s of CPU at each fleet start, and ~300 MB per engine actor, to unpickle tensors)."""
    from safetensors.torch import save

    return save({k: v.detach().contiguous().cpu() for k, v in state_dict.items()}, metadata={"format": "pt"})


def write_weights(workdir: str, model_path: str, weights: Optional[bytes], version: int) -> str:
    """A model directory for /update_weights_from_disk: `weights` (weights_file_bytes) as its
    safetensors file beside links to model_path's config and tokenizer, renamed into place whole.
    None: model_path itself."""
    if weights is None:
        return model_path
    if not isinstance(weights, (bytes, bytearray, memoryview)):
        raise TypeError(f"weights must be a safetensors file's bytes (policies/engines/process.py "
                        f"weights_file_bytes), not {type(weights).__name__}")
    final = os.path.join(workdir, f"weights-v{version}")
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name in os.listdir(model_path):  # config, tokenizer, generation config
        if not name.endswith((".safetensors", ".bin", ".pt", ".index.json")):
            src = os.path.join(model_path, name)
            if os.path.isfile(src):
                os.symlink(os.path.abspath(src), os.path.join(tmp, name))
    with open(os.path.join(tmp, "model.safetensors"), "wb") as f:
        f.write(weights)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def drop_old_weights(workdir: str, keep: str) -> None:
    for name in os.listdir(workdir):
        path = os.path.join(workdir, name)
        if name.startswith("weights-v") and path != keep:
            shutil.rmtree(path, ignore_errors=True)


def server_kv_usage(answer) -> Optional[float]:
    """KV-pool use (0..1) from GET /v1/loads: the busiest DP rank's `token_usage` (SGLang's
    LoadSnapshot; /server_info carries no KV use in SGLang 0.5.23). None when it says none."""
    loads = answer.get("loads") if isinstance(answer, dict) else None
    usages = [load["token_usage"] for load in loads or [] if isinstance(load, dict)
              and isinstance(load.get("token_usage"), (int, float))]
    return float(max(usages)) if usages else None
