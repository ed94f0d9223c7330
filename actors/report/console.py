"""What a person at the terminal sees during a run: one live progress line per stage, the lines
that matter, and every warning or error that needs a human, once, with the log's path.

Everything else the run prints (Ray's and the actors' chatter, the per-step status lines,
weight-loading bars, tracebacks of actors ended on purpose at a stage's end) goes to
`runs/<name>/logs/console.log`: in `session()`, file descriptors 1 and 2 of this process point at
that file, so whatever writes to them (Ray's log forwarding, C extensions, child processes such
as Ray's own and the trace workers) lands there and never blocks on us. A thread follows the
file and surfaces what `watch.Watch` picks. `verbose` leaves the streams alone.

Code that has something for the human calls `say`, `warn` or `progress` here; a plain print is
for the log.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
import time
from pathlib import Path
from typing import Iterator, Optional, TextIO

from actors.report.console_watch import Watch
from actors.report.redact import RedactingStream

PREFIX = "[swerve] "
# Without a terminal (a pipe, `ray job submit`, CI) a progress line is printed when it crosses
# each quarter: a long run's output still fits on one screen.
MILESTONES = (0.25, 0.5, 0.75, 1.0)
# A live line is redrawn at most this often (a bar updated per attempt would flood a slow terminal).
REDRAW_S = 0.5
FOLLOW_S = 0.2
# How long the follower may take to print the last warnings at the end (a terminal nobody reads
# must not hold the run's exit).
LAST_WARNINGS_S = 5.0


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _rate(per_s: float, unit: str) -> str:
    return f"{per_s:.2f} {unit}/s" if per_s >= 0.1 else f"{per_s * 60:.2f} {unit}/min"


class Progress:
    """One stage's line: `label done/total unit, rate, ETA, figure` (the figure: pass@1 so far,
    reward and staleness, loss: whatever tells this stage's story)."""

    def __init__(self, console: "Console", label: str, total: int, unit: str, done: int = 0):
        self.console, self.label, self.total, self.unit = console, label, max(total, 0), unit
        self.done, self.figure = done, ""
        self.base = done  # a resumed stage's rate counts only what it does now
        self.started = time.monotonic()
        self.milestone = 0  # how many of MILESTONES were printed
        self.finished = False

    def update(self, done: int, figure: str = "", total: Optional[int] = None) -> None:
        """`total`: where the stage learns its size only once it runs (SFT's steps)."""
        self.total = self.total if total is None else total
        self.done, self.figure = min(done, self.total), figure or self.figure
        self.console.show(self)

    def finish(self, figure: str = "") -> None:
        if not self.finished:
            self.total = max(self.total, self.done)
            self.update(self.total, figure)
            self.finished = True
            self.console.ended(self)

    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0

    def text(self, now: float) -> str:
        elapsed = now - self.started
        parts = [f"{PREFIX}{self.label}: {self.done}/{self.total} {self.unit}"]
        if self.done > self.base and elapsed > 0:
            per_s = (self.done - self.base) / elapsed
            parts.append(_rate(per_s, self.unit))
            left = self.total - self.done
            parts.append(f"ETA {_duration(left / per_s)}" if left > 0 else f"took {_duration(elapsed)}")
        else:
            parts.append(f"{_duration(elapsed)} so far")
        if self.figure:
            parts.append(self.figure)
        return ", ".join(parts)


class Console:
    """The terminal's one writer. `live`: a terminal, where a progress line is redrawn in place."""

    def __init__(self, terminal: TextIO, live: bool = False, log_path: Optional[Path] = None,
                 log: Optional[TextIO] = None):
        self.terminal, self.live, self.log_path, self.log = terminal, live, log_path, log
        self.lock = threading.Lock()
        self.active: Optional[Progress] = None  # the live line on screen now
        self.last_draw = 0.0
        self.warned: set[str] = set()
        # The command's last line, said after everything else (even the log's name): where to look next.
        self.last_line: Optional[str] = None

    def say(self, text: str) -> None:
        """A line for the human (in the log too, where there is one); a table (several lines) as it is."""
        with self.lock:
            self._clear()
            self._emit(text if text.startswith(PREFIX) or "\n" in text else PREFIX + text)
            self._redraw()

    def warn(self, text: str) -> None:
        """A warning that needs a human: on the console once, naming the log."""
        key = text.strip()
        with self.lock:
            if key in self.warned:
                return
            self.warned.add(key)
        where = f" (details: {self.log_path})" if self.log_path else ""
        self.say(f"warning: {key}{where}")

    def progress(self, label: str, total: int, unit: str, done: int = 0) -> Progress:
        bar = Progress(self, label, total, unit, done)
        self.show(bar)
        return bar

    # -- drawing (the bar calls these) ----------------------------------------------------------
    def show(self, bar: Progress) -> None:
        now = time.monotonic()
        with self.lock:
            if self.live:
                if self.active is not None and self.active is not bar:
                    self.terminal.write("\n")  # the line before stays on screen as it was last drawn
                    self.active = None
                self.active = bar
                if now - self.last_draw >= REDRAW_S or bar.fraction() >= 1.0:
                    self._redraw(now)
                return
            reached = sum(bar.fraction() >= m for m in MILESTONES)
            if reached > bar.milestone:
                bar.milestone = reached
                self._emit(bar.text(now))

    def ended(self, bar: Progress) -> None:
        with self.lock:
            if self.live and self.active is bar:
                self._redraw()
                self.terminal.write("\n")
                self.terminal.flush()
                self.active = None

    def _clear(self) -> None:
        if self.live and self.active is not None:
            self.terminal.write("\r\x1b[K")

    def _redraw(self, now: Optional[float] = None) -> None:
        if self.live and self.active is not None:
            self.last_draw = now or time.monotonic()
            self.terminal.write("\r\x1b[K" + self.active.text(self.last_draw))
            self.terminal.flush()

    def _emit(self, line: str) -> None:
        self.terminal.write(line + "\n")
        self.terminal.flush()
        if self.log is not None:
            self.log.write(line + "\n")


_active = Console(sys.stdout)


def current() -> Console:
    return _active


def say(text: str) -> None:
    _active.say(text)


def say_last(text: str) -> None:
    """The command's last line on the console (a session says it when it ends, after the log's name)."""
    _active.last_line = text


def warn(text: str) -> None:
    _active.warn(text)


def progress(label: str, total: int, unit: str, done: int = 0) -> Progress:
    return _active.progress(label, total, unit, done)


def _terminal() -> tuple[TextIO, Optional[int]]:
    """A stream onto what stdout is now, kept when fd 1 moves to the log; under pytest's capture
    (no file descriptor) that capture itself."""
    stream = sys.stdout
    try:
        fd = stream.fileno()
    except (AttributeError, io.UnsupportedOperation, ValueError):
        return stream, None
    stream.flush()
    copy = os.dup(fd)
    return RedactingStream(open(copy, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)), copy


@contextlib.contextmanager
def session(log_dir: Path, verbose: bool = False) -> Iterator[Console]:
    """The console of one command: quiet (the rest in log_dir/console.log) unless verbose."""
    global _active
    if verbose:
        previous, _active = _active, Console(sys.stdout)
        try:
            yield _active
        finally:
            if _active.last_line is not None:
                _active.say(_active.last_line)
            _active = previous
        return
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "console.log"
    terminal, terminal_fd = _terminal()
    live = terminal.isatty() and os.environ.get("TERM", "") != "dumb"
    log = open(log_path, "a", buffering=1, encoding="utf-8", errors="replace")
    own = RedactingStream(log)
    own.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(sys.argv)}; a local Ray's own process logs "
              f"are under /tmp/ray/session_latest/logs\n")
    console = Console(terminal, live, log_path, own)
    streams = sys.stdout, sys.stderr
    for stream in streams:
        stream.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = RedactingStream(open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False))
    sys.stderr = RedactingStream(open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False))
    follower = _Follower(log_path, log.tell(), console)
    previous, _active = _active, console
    failed = False
    try:
        yield console
    except BaseException:
        failed = True
        raise
    finally:
        _active = previous
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        sys.stdout, sys.stderr = streams
        follower.stop()  # the last warnings first
        console.say(f"the run stopped with an error; its whole log: {log_path}" if failed
                    else f"the whole log: {log_path}")
        if console.last_line is not None:
            console.say(console.last_line)
        log.close()
        if terminal_fd is not None:
            terminal.flush()
            os.close(terminal_fd)


class _Follower(threading.Thread):
    """Reads what lands in the log and hands each line to the Watch; what it picks reaches the
    console once. It only reads: the writers never wait on it."""

    def __init__(self, path: Path, offset: int, console: Console):
        super().__init__(name="swerve-console-follower", daemon=True)
        self.path, self.offset, self.console = path, offset, console
        self.watch = Watch()
        self.stopping = threading.Event()
        self.start()

    def run(self) -> None:
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            pending = b""
            while True:
                stopping = self.stopping.is_set()
                chunk = handle.read()
                pending += chunk
                *lines, pending = pending.replace(b"\r", b"\n").split(b"\n")
                for line in lines:
                    for text in self.watch.feed(line.decode("utf-8", "replace")):
                        self.console.warn(text)
                if stopping:
                    for text in self.watch.feed(pending.decode("utf-8", "replace")) if pending else ():
                        self.console.warn(text)
                    return
                if not chunk:
                    time.sleep(FOLLOW_S)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=LAST_WARNINGS_S)
