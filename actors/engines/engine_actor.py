"""EngineActor: owns one inference server process and is the only thing that talks to it.

Backends: `cpu` runs our server (`python -m policies.server`), `sglang` runs a real SGLang
server (GPU); both speak SGLang's native HTTP API through one `EngineClient`. Ray runs this
actor threaded, so many `generate` calls wait on the server at once and it batches them.

Weight updates never lose an in-flight request:
- a server that tags every token with its weight version (ours) keeps in-flight requests
  across pause(retract|in_place) -> update_weights_from_disk -> continue;
- a server that does not (SGLang) is paused with mode "abort": each in-flight request comes
  back with the tokens it has so far, waits for the update, and resumes from prompt + those
  tokens with the remaining budget, so every segment's tokens carry the one version that
  produced them.
"""
from __future__ import annotations

import atexit
import logging
import os
import shutil

import tempfile
import threading
import time
import uuid
from typing import Callable, Optional

from policies.engines.client import EngineClient, EngineHTTPError, EngineUnreachable, generate_body, parse_generate
from configs.schema import DeadlinesConfig, EngineConfig
from envs.outcomes import InfraError, InfraSource
from policies.sample_types import FINISH_ABORT, FINISH_LENGTH, SampleOutput, SampleRequest
from policies.seeds import derive_seed
from policies.engines import protocol
from policies.engines.process import (ENGINE_HOST, ServerProcess, drop_old_weights, free_port, server_command,
                                     server_env, server_kv_usage, weights_root, write_weights)

log = logging.getLogger(__name__)

STATS_INTERVAL_S = 0.5


# A server that cannot bind its port says so in these words (ours: PortInUse; SGLang's uvicorn:
# "[Errno 98] ... address already in use").
PORT_TAKEN_TEXT = "already in use"
PORT_TRIES = 3


class PortTaken(RuntimeError):
    """Another process bound the engine server's port first."""


class EngineActor:
    def __init__(self, index: int, cfg: EngineConfig, model_path: str, wait_for_weights: bool = False,
                 exit_on_server_death: bool = False, deadlines: Optional[DeadlinesConfig] = None):
        """wait_for_weights: serve nothing until the first `update_weights` (a replacement engine
        must not serve the checkpoint's weights once training has moved on).
        exit_on_server_death: end this process when the server dies, so Ray reports the actor
        dead and the driver replaces it (set for Ray actors, never in-process).
        deadlines: the run's (engine_health_s bounds each probe of the server, engine_drain_s
        the wait for requests to come back before a weight update)."""
        self.index, self.cfg, self.model_path = index, cfg, model_path
        self.deadlines = deadlines or DeadlinesConfig()
        self._version = 0
        self._ready = threading.Event()
        if not wait_for_weights:
            self._ready.set()
        self._lock = threading.Lock()
        self._update_lock = threading.Lock()
        # Abort-mode updates (servers without per-token versions): the gate closes, every
        # request at the server comes back, weights change, the gate opens; each segment sent
        # to the server thus runs under one version, recorded when it is sent.
        self._cv = threading.Condition(self._lock)
        self._gate_open = True
        self._epoch = 0  # abort-mode updates started so far
        self._sending: set[str] = set()  # rids with a /generate call under way
        self._closing = False
        self._inflight: dict[str, int] = {}  # rid -> reserved KV tokens
        self._user_aborted: set[str] = set()
        self._queued = 0
        self._served = 0
        self._kv_peak_tokens = 0
        self._tokens = 0
        self._window_start = time.monotonic()
        # Time with at least one request in flight (stats' busy_fraction).
        self._busy_s = 0.0
        self._busy_since = self._window_start
        self.last_update: dict = {}
        self._exit_on_server_death = exit_on_server_death
        self._server_kv: Optional[float] = None  # the server's own KV-pool use, when it reports one
        self._server_kv_peak = 0.0
        self.token_versions = False
        self.workdir = tempfile.mkdtemp(prefix=f"swerve-engine-{index}-", dir=weights_root(cfg))
        self.server: Optional[ServerProcess] = None
        atexit.register(self.close)
        try:
            self._start_server()
            self.token_versions = self._probe_token_versions()
        except BaseException:
            self.close()
            raise
        threading.Thread(target=self._watch_server, name=f"engine-{index}-watch", daemon=True).start()

    # -- lifecycle --------------------------------------------------------------------
    def _start_server(self) -> None:
        """Start the server on a port the OS just handed out. That port was free a moment ago, not
        held: when another process binds it first, the server cannot bind and exits, and the
        start is tried again on a fresh port (PORT_TRIES in all)."""
        for attempt in range(1, PORT_TRIES + 1):
            self.port = free_port()
            self.client = EngineClient(f"http://{ENGINE_HOST}:{self.port}", self.cfg.request_timeout_s)
            log_name = "server.log" if attempt == 1 else f"server-{attempt}.log"  # each try's own words
            self.server = ServerProcess(server_command(self.cfg, self.model_path, self.port),
                                        os.path.join(self.workdir, log_name), env=server_env(self.cfg, dict(os.environ)))
            try:
                self._wait_healthy()
                return
            except PortTaken as taken:
                if attempt == PORT_TRIES:
                    raise RuntimeError(f"engine {self.index}: {PORT_TRIES} ports in a row were taken before its "
                                       f"server could bind them; last: {taken}") from taken
                log.warning("engine %d: %s; starting its server on another port", self.index, taken)

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.cfg.startup_timeout_s
        while time.monotonic() < deadline:
            if not self.server.alive():
                if PORT_TAKEN_TEXT in self.server.log_tail().lower():
                    raise PortTaken(f"port {self.port} was taken by another process before the server bound it")
                raise RuntimeError(f"engine {self.index}: {self.cfg.backend} server exited with code "
                                   f"{self.server.proc.returncode}; command: {' '.join(self.server.cmd)}\n"
                                   f"--- server log tail ---\n{self.server.log_tail()}")
            if self.client.health(timeout_s=self.deadlines.engine_health_s):
                return
            time.sleep(0.2)
        raise RuntimeError(f"engine {self.index}: {self.cfg.backend} server not healthy after "
                           f"{self.cfg.startup_timeout_s:.0f}s (engine.startup_timeout_s); command: "
                           f"{' '.join(self.server.cmd)}\n--- server log tail ---\n{self.server.log_tail()}")

    def _probe_token_versions(self) -> bool:
        """Does this server tag each token with its weight version (our extension)?"""
        answer = self.client.generate_raw(protocol.generate_request([0], max_new_tokens=1, temperature=0.0,
                                                                    rid=f"probe-{uuid.uuid4().hex}"))
        item = answer[0] if isinstance(answer, list) else answer
        return protocol.token_weight_versions(item) is not None

    def _watch_server(self) -> None:
        """Sample the server's KV use (for the peak) and notice when the server dies."""
        while not self._closing:
            if not self.server.alive():
                if self._closing:
                    return
                log.error("engine %d: server died (code %s)\n%s", self.index, self.server.proc.returncode,
                          self.server.log_tail())
                if self._exit_on_server_death:
                    os._exit(1)  # Ray reports the actor dead; the driver replaces it
                return
            try:
                usage = server_kv_usage(self.client.loads(timeout_s=self.deadlines.engine_health_s))
            except (EngineHTTPError, EngineUnreachable):
                usage = None
            if usage is not None:
                with self._lock:
                    self._server_kv = usage
                    self._server_kv_peak = max(self._server_kv_peak, usage)
            time.sleep(STATS_INTERVAL_S)

    def close(self) -> None:
        self._closing = True
        if self.server is not None:  # None: the first start failed before a server ran
            self.server.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __del__(self):
        if "server" not in self.__dict__:
            return  # __init__ never ran or failed early (Ray builds such instances): nothing to close
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit; logged, not raised from a finalizer
            log.exception("closing an engine server at interpreter exit failed")

    def ping(self, timeout_s: float) -> bool:
        """Alive and answering: a server that is stopped (SIGSTOP, a debugger) or wedged (no /health
        answer within timeout_s) counts as hung, so the engine set replaces it instead of waiting
        on it. While a weight update runs, a server may rightly be too busy to answer (a big
        model loads for minutes): then only a stopped process counts, deadlines.weight_sync_s
        bounds the rest."""
        if not self.server.alive() or self.server.stopped():
            return False
        return self._update_lock.locked() or self.client.health(timeout_s)

    # -- requests ---------------------------------------------------------------------
    def generate(self, request: SampleRequest) -> SampleOutput:
        room = self.cfg.max_context_tokens - len(request.prompt_ids)
        if room <= 0:
            # The context cap is per request: one runaway conversation cannot grow the batch's KV.
            return SampleOutput([], [], [], FINISH_LENGTH)
        budget = min(request.max_new_tokens, room)
        if budget <= 0:
            return SampleOutput([], [], [], FINISH_LENGTH)
        with self._lock:
            self._queued += 1
        try:
            self._ready.wait()
        finally:
            with self._lock:
                self._queued -= 1
        rid = f"engine{self.index}-{uuid.uuid4().hex}"
        out = SampleOutput([], [], [], FINISH_LENGTH)
        with self._lock:
            if not self._inflight:
                self._busy_since = time.monotonic()
            self._inflight[rid] = len(request.prompt_ids) + budget
            self._kv_peak_tokens = max(self._kv_peak_tokens, sum(self._inflight.values()))
        try:
            while True:
                with self._cv:
                    while not self._gate_open:
                        self._cv.wait()
                    self._sending.add(rid)
                    version, epoch = self._version, self._epoch
                try:
                    seg = self._generate_once(request, out, budget, rid)
                finally:
                    with self._cv:
                        self._sending.discard(rid)
                        self._cv.notify_all()
                if not self.token_versions:
                    seg.versions = [version] * len(seg.token_ids)  # the segment ran under one version
                out.token_ids += seg.token_ids
                out.logprobs += seg.logprobs
                out.versions += seg.versions
                out.finish_reason = seg.finish_reason
                # Aborted by a weight update: resume from what it has, with the new weights.
                resumable = (seg.finish_reason == FINISH_ABORT and rid not in self._user_aborted
                             and self._epoch != epoch and len(out.token_ids) < budget)
                if not resumable:
                    break
            if out.finish_reason == FINISH_ABORT and rid not in self._user_aborted and len(out.token_ids) >= budget:
                out.finish_reason = FINISH_LENGTH
        finally:
            with self._lock:
                self._inflight.pop(rid, None)
                if not self._inflight:
                    self._busy_s += time.monotonic() - self._busy_since
                self._user_aborted.discard(rid)
                self._tokens += len(out.token_ids)
                self._served += 1
        return out

    def _generate_once(self, request: SampleRequest, so_far: SampleOutput, budget: int, rid: str) -> SampleOutput:
        seed = request.seed
        if seed is not None and so_far.token_ids:
            seed = derive_seed(seed, len(so_far.token_ids))  # a resumed segment draws fresh randomness
        body = generate_body(request, rid, budget - len(so_far.token_ids),
                             list(request.prompt_ids) + so_far.token_ids, seed, with_priority=self.cfg.priority == "age")
        try:
            answer = self.client.generate_raw(body)
        except EngineHTTPError as err:
            if err.status == 400 and _is_length_error(err.body):
                return SampleOutput([], [], [], FINISH_LENGTH)  # the server's own context cap
            if err.status >= 500:
                raise InfraError(InfraSource.ENGINE, f"engine {self.index}: {err}") from err
            raise ValueError(f"engine {self.index} refused the request: {err}") from err
        except EngineUnreachable as err:
            raise InfraError(InfraSource.ENGINE, f"engine {self.index}: server unreachable: {err}") from err
        item = answer[0] if isinstance(answer, list) else answer
        return parse_generate(item, self._version)

    def abort(self, rid: str) -> None:
        with self._lock:
            if rid not in self._inflight:
                return
            self._user_aborted.add(rid)
        self.client.abort(rid)

    def inflight(self) -> list[str]:
        with self._lock:
            return list(self._inflight)

    # -- weights ----------------------------------------------------------------------
    def update_weights(self, weights: Optional[bytes], version: int) -> int:
        """Serve `weights` (a safetensors file's bytes: TrainerShard.export_weights) as policy `version`
        (None: the checkpoint this engine started from);
        returns the version now served. In-flight requests continue (see module docstring)."""
        with self._update_lock:
            t0 = time.perf_counter()
            path = write_weights(self.workdir, self.model_path, weights, version)
            t_write = time.perf_counter() - t0
            self._apply(lambda: self.client.update_weights_from_disk(path, weight_version=str(version)), version)
            self._set_version(version, t0, t_write)
            drop_old_weights(self.workdir, keep=path)
        return self._version

    def init_weights_update_group(self, master_address: str, master_port: int, rank_offset: int, world_size: int,
                                  group_name: str = protocol.WEIGHT_UPDATE_GROUP, backend: str = "nccl") -> dict:
        """GPU path: join the trainer's NCCL group (SGLang `/init_weights_update_group`)."""
        return self.client.init_weights_update_group(master_address, master_port, rank_offset, world_size,
                                                     group_name, backend)

    def update_weights_from_distributed(self, names: list, dtypes: list, shapes: list, version: int,
                                        group_name: str = protocol.WEIGHT_UPDATE_GROUP) -> int:
        """GPU path: pause, then receive the trainer's NCCL broadcast (the trainer must start
        broadcasting after this call is under way: pausing with NCCL in flight hangs)."""
        with self._update_lock:
            t0 = time.perf_counter()
            self._apply(lambda: self.client.update_weights_from_distributed(
                names, dtypes, shapes, weight_version=str(version), group_name=group_name), version)
            self._set_version(version, t0, 0.0)
        return self._version

    def _apply(self, load: Callable[[], dict], version: int) -> None:
        """pause -> load -> continue. With per-token versions the server keeps in-flight requests
        (retract / in_place); without, every request comes back aborted first (see generate)."""
        mode = self.cfg.pause_mode if self.token_versions else protocol.PAUSE_ABORT
        if mode == protocol.PAUSE_ABORT:
            with self._cv:
                self._gate_open = False
                self._epoch += 1
        try:
            self.client.pause_generation(mode)
            try:
                if mode == protocol.PAUSE_ABORT:
                    self._drain(self.deadlines.engine_drain_s)
                load()
                self._version = version
            finally:
                self.client.continue_generation()
        except (EngineHTTPError, EngineUnreachable) as err:
            raise InfraError(InfraSource.ENGINE, f"engine {self.index}: weight update failed: {err}") from err
        finally:
            with self._cv:
                self._gate_open = True
                self._cv.notify_all()
        self._ready.set()

    def _drain(self, timeout_s: float) -> None:
        """Wait until every /generate call under way has come back; requests that reached the
        server after the pause are waiting there, and are aborted too."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._cv:
                if not self._sending:
                    return
                self._cv.wait(0.05)
                if not self._sending:
                    return
            if time.monotonic() > deadline:
                raise EngineUnreachable(f"{len(self._sending)} requests did not come back after pause(abort)")
            self.client.abort_all()

    def _set_version(self, version: int, t0: float, t_write: float) -> None:
        total = time.perf_counter() - t0
        self.last_update = {"version": version, "total_s": total, "write_s": t_write, "load_s": total - t_write}

    # -- state ------------------------------------------------------------------------
    def version(self) -> int:
        return self._version

    def stats(self, reset_peak: bool = False) -> dict:
        capacity = self.cfg.max_batch_size * self.cfg.max_context_tokens
        now = time.monotonic()
        with self._lock:
            kv_tokens = sum(self._inflight.values())
            self._kv_peak_tokens = max(self._kv_peak_tokens, kv_tokens)
            stats = {
                "index": self.index,
                "version": self._version,
                "ready": self._ready.is_set(),
                "running": len(self._inflight),
                "queued": self._queued,
                "served": self._served,
                # The server's own KV use when it reports one; else what in-flight requests reserve.
                "kv_usage": self._server_kv if self._server_kv is not None else kv_tokens / capacity,
                "kv_usage_peak": (self._server_kv_peak if self._server_kv is not None
                                  else self._kv_peak_tokens / capacity),
                "tokens_per_s": self._tokens / max(now - self._window_start, 1e-6),
                "busy_fraction": min(self._busy_window_s(now) / max(now - self._window_start, 1e-6), 1.0),
                "weight_update_s": self.last_update.get("total_s", 0.0),
                "server_alive": self.server.alive(),
                "url": self.client.base_url,
            }
            if reset_peak:
                self._kv_peak_tokens = kv_tokens
                self._server_kv_peak = self._server_kv or 0.0
                self._tokens = 0
                self._window_start = now
                self._busy_s = 0.0
                self._busy_since = max(self._busy_since, now)
        return stats

    def _busy_window_s(self, now: float) -> float:
        """Busy time in the stats window so far (the lock is held)."""
        return self._busy_s + (now - max(self._busy_since, self._window_start) if self._inflight else 0.0)


def _is_length_error(body: str) -> bool:
    text = body.lower()
    return any(key in text for key in ("context", "too long", "exceed", "max_new_tokens", "length"))
