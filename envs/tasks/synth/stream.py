"""An endless stream of bugs injected into one local Python repository (`tasks.format=synth
tasks.split=stream`, envs/tasks/stream.py).

Rows come from `envs.tasks.synth.injector.iter_synthesized` in its seeded try order, so row i is the same
bug for the same repository content and settings. A background thread makes them a few ahead of
demand and appends each to a JSONL file under the cache:

    <cache_dir or envs.tasks.cache.cache_root()>/synth-stream/<repo name>-<key>.jsonl  (+ .done: ended)

The key hashes the repository's content (what synthesis copies), the seed, the families, the
settings that shape a row and the held-out patches. Another process, or a restarted run, reads the
rows already in the file and, when it needs more, resumes the generator after them (their
candidates are passed over without a test run), so an index names the same task everywhere and
forever. A row is appended under an exclusive lock, and only when the file holds exactly the rows
the appending generator accounted for: two processes making the same stream never write a row
twice; the one that finds the file grew resumes after the rows it finds there.

A row becomes a Task through the SWE-smith loader (envs/tasks/loaders/swesmith.py): its workspace is a
cached copy of the repository with the row's bug patch applied, and its hidden cases are the row's
(envs/tasks/synth/call_recorder.py).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Callable, Collection, Optional, Sequence

from configs.schema import SynthConfig
from envs.tasks.cache import cache_root
from envs.tasks.loaders.common import tree_hash
from envs.tasks.loaders.swesmith import row_converter
from envs.tasks.stream import STREAM_SPLIT
from envs.tasks.synth.call_recorder import SETTINGS as HIDDEN_CASE_SETTINGS
from envs.tasks.synth.injector import SynthError, iter_synthesized, left_out_of_copy
from envs.tasks.task import Task

log = logging.getLogger(__name__)


class StreamError(RuntimeError):
    """The stream's background synthesis failed (the original error is the __cause__)."""


class SynthStream:
    """`envs.tasks.stream.TaskStream` over the bugs of the repository at `repo` (`source`: its path).

    Demand: the stream makes rows until it holds `lookahead` more than the highest index asked
    for -- by `task(i)` or `row(i)` (index i), `want(n)` (index n - 1, no lookahead added) or
    `available()` (index -1: the first `lookahead` rows) -- and stops there until asked for more.
    `exclude_patches`: bugs never handed out (held-out rows made by `swerve tasks synth`);
    `test_args`: pytest arguments of every test run (iter_synthesized's).
    `stats`: the counters of the generator running in this process (iter_synthesized's; empty
    while none ran). Picklable: a copy carries the settings only and starts its own thread on
    first demand. `close()` waits for the test run in progress.
    """

    def __init__(self, repo: str | os.PathLike, cfg: SynthConfig, cache_dir: Optional[str] = None, *, lookahead: int,
                 exclude_patches: Collection[str] = (), test_args: Sequence[str] = ()):
        path = Path(repo).expanduser().resolve()
        if not path.is_dir():
            raise SynthError(f"the synth stream's repository {repo!r} is not a directory")
        if lookahead < 1:
            # The trainer only takes tasks already made: with none made ahead it would wait forever.
            raise ValueError(f"the synth stream's lookahead is {lookahead}; it must be >= 1")
        self.repo, self.source = path, str(path)
        self.cfg, self.cache_dir, self.lookahead = cfg, cache_dir, lookahead
        self.exclude_patches = frozenset(exclude_patches)
        self.test_args = tuple(test_args)
        self.stats: dict = {}
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self._error: Optional[Exception] = None
        self._target = 0  # rows wanted
        self._rows: list[dict] = []
        self._index: dict[str, int] = {}
        self._file: Optional[Path] = None  # found on first use: it hashes the whole repository
        self._offset = 0  # bytes of the file read into _rows
        self._done_at: Optional[int] = None  # the stream's length, once its file says it ended
        self._to_task: Optional[Callable[[dict], Task]] = None

    def __getstate__(self) -> dict:
        return {"repo": self.source, "cfg": self.cfg, "cache_dir": self.cache_dir, "lookahead": self.lookahead,
                "exclude_patches": self.exclude_patches, "test_args": self.test_args}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    # -- envs.tasks.stream.TaskStream --------------------------------------------------------
    def task(self, index: int) -> Task:
        """The index-th task; blocks while it is made. IndexError when the stream ended before it,
        StreamError when making it failed."""
        row = self.row(index)  # first: it opens the stream, which makes _to_task
        return self._to_task(row)

    def index_of(self, task_id: str) -> int:
        with self._cond:
            self._open()
            if task_id not in self._index:
                self._sync()  # made by another process since the last look
            if task_id not in self._index:
                raise ValueError(f"{task_id!r} is not a task of the synth stream of {self.source} (seed "
                                 f"{self.cfg.seed}, {len(self._rows)} tasks made so far)")
            return self._index[task_id]

    def available(self) -> int:
        with self._cond:
            self._open()
            self._want(self.lookahead)
            self._raise_error()
            return len(self._rows)

    def finished(self) -> bool:
        with self._cond:
            self._open()
            self._raise_error()
            return self._ended()

    def close(self) -> None:
        """Stops making rows; returns once the thread ended (after the test run in progress) and
        removed its working copy. Rows already made stay readable."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # -- rows and demand -----------------------------------------------------------------
    def row(self, index: int) -> dict:
        """The index-th row (SWE-smith format, split "stream", repo_path `source`); blocks while it
        is made."""
        if index < 0:
            raise IndexError(f"stream index {index} < 0")
        with self._cond:
            self._open()
            self._want(index + 1 + self.lookahead)
            while index >= len(self._rows):
                self._raise_error()
                if self._ended():
                    raise IndexError(f"the synth stream of {self.source} ended after {len(self._rows)} tasks "
                                     f"(every candidate mutation was tried): there is no task {index}")
                if self._closed:
                    raise RuntimeError(f"the synth stream of {self.source} is closed; task {index} was not made")
                self._cond.wait()
            # The file may have been written where the repository had another path: same content.
            return dict(self._rows[index], repo_path=self.source)

    @property
    def rows_file(self) -> Path:
        """The JSONL file that holds the rows made so far (by any process)."""
        with self._cond:
            self._open()
            return self._file

    def want(self, count: int) -> None:
        """Have rows 0..count-1 made in the background (returns at once)."""
        with self._cond:
            self._open()
            self._want(count)

    def _want(self, count: int) -> None:
        self._target = max(self._target, count)
        if len(self._rows) >= self._target or self._ended() or self._error is not None or self._closed:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._produce, name=f"synth-stream-{self.repo.name}",
                                            daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def _ended(self) -> bool:
        return self._done_at is not None and len(self._rows) >= self._done_at

    def _raise_error(self) -> None:
        if self._error is not None:
            raise StreamError(f"the synth stream of {self.source} failed: {type(self._error).__name__}: "
                              f"{self._error}\n(its rows: {self._file})") from self._error

    # -- the background thread -----------------------------------------------------------
    def _produce(self) -> None:
        made = None  # the generator
        accounted = 0  # rows of the file the generator resumed after or yielded
        try:
            while True:
                with self._cond:
                    while not self._closed and len(self._rows) >= self._target:
                        self._cond.wait()
                    if self._closed:
                        return
                    self._sync()
                    if self._ended():
                        self._cond.notify_all()
                        return
                    if len(self._rows) >= self._target:
                        continue
                    if made is not None and accounted != len(self._rows):
                        made.close()  # another process appended rows: resume after them
                        made = None
                    if made is None:
                        made = iter_synthesized(
                            self.repo, self.cfg, test_args=self.test_args, stats=self.stats,
                            log=lambda message: log.info("%s: %s", self.repo.name, message),
                            exclude_patches=self.exclude_patches, resume=[row["patch"] for row in self._rows])
                        accounted = len(self._rows)
                row = next(made, None)  # test runs happen here, outside the lock
                with self._cond:
                    if row is None:
                        made = None
                        if self._mark_ended(accounted):
                            self._cond.notify_all()
                            return
                        continue  # the file grew meanwhile: its rows come first
                    row["split"] = STREAM_SPLIT
                    if self._append(row, accounted):
                        accounted += 1
                    self._cond.notify_all()
        except Exception as error:  # noqa: BLE001 -- handed to the consumer: raised by its next call
            with self._cond:
                self._error = error
                self._cond.notify_all()
        finally:
            if made is not None:
                made.close()

    # -- the rows file (callers hold self._cond) ------------------------------------------
    def _open(self) -> None:
        if self._file is not None:
            return
        cfg = self.cfg
        settings = {
            "repo": self.repo.name, "content": tree_hash(self.repo, left_out_of_copy), "seed": cfg.seed,
            "families": list(cfg.families), "max_p2p": cfg.max_p2p, "max_candidates": cfg.max_candidates,
            "max_detailed_failures": cfg.max_detailed_failures, "max_listed_failures": cfg.max_listed_failures,
            "python": cfg.python, "test_args": list(self.test_args),
            "hidden_cases": HIDDEN_CASE_SETTINGS,
            "excluded": sorted(hashlib.sha256(patch.encode()).hexdigest() for patch in self.exclude_patches),
        }
        key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
        root = Path(self.cache_dir).expanduser() if self.cache_dir else cache_root()
        self._file = root / "synth-stream" / f"{self.repo.name}-{key}.jsonl"
        self._file.parent.mkdir(parents=True, exist_ok=True)
        self._to_task = row_converter(self.repo, Path(self.cache_dir).expanduser() if self.cache_dir else None)
        self._sync()

    def _done_file(self) -> Path:
        return self._file.with_suffix(".done")

    def _sync(self) -> None:
        """Take in the rows appended to the file since the last look."""
        done = self._done_file()
        # Read before the rows: the end is written after the last row, so no row is missed.
        done_at = int(done.read_text()) if done.exists() else None
        if self._file.exists() or self._offset:
            with open(self._file, "rb") as handle:
                if os.fstat(handle.fileno()).st_size < self._offset:
                    raise ValueError(f"{self._file} lost rows this stream had read (deleted or rewritten "
                                     "while in use)")
                handle.seek(self._offset)
                data = handle.read()
            complete = data[: data.rfind(b"\n") + 1]  # a line being written is read next time
            for number, line in enumerate(complete.splitlines(), len(self._rows) + 1):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{self._file}: row {number} is not JSON ({error}); delete the file "
                                     "to make the stream's rows again") from None
                if row["instance_id"] in self._index:
                    raise ValueError(f"{self._file}: row {number} repeats {row['instance_id']!r}; delete the "
                                     "file to make the stream's rows again")
                self._index[row["instance_id"]] = len(self._rows)
                self._rows.append(row)
            self._offset += len(complete)
        self._done_at = done_at

    def _append(self, row: dict, position: int) -> bool:
        """Append row as row `position`; False (nothing written) when the file holds another count."""
        with open(self._file, "ab") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
            self._sync()
            if len(self._rows) != position or self._ended():
                return False
            if os.fstat(handle.fileno()).st_size > self._offset:
                os.ftruncate(handle.fileno(), self._offset)  # a writer died mid-line: drop the fragment
            line = (json.dumps(row) + "\n").encode()
            # One write: a reader sees the whole line or none of it (it reads complete lines only).
            if os.write(handle.fileno(), line) != len(line):
                raise OSError(f"{self._file}: a row was written in part (disk full?)")
            self._offset += len(line)
            self._index[row["instance_id"]] = len(self._rows)
            self._rows.append(row)
            return True

    def _mark_ended(self, position: int) -> bool:
        """Record that the stream ends after `position` rows; False when the file holds another count."""
        with open(self._file, "ab") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            self._sync()
            if len(self._rows) != position:
                return False
            staging = self._done_file().with_suffix(f".done.{os.getpid()}")
            staging.write_text(str(position))
            os.replace(staging, self._done_file())
            self._done_at = position
            return True
