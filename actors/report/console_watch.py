"""Which lines of a run's log need a human: warnings and errors, less what is known to be
expected, each kind once.

A line is a candidate when it carries a level word (WARNING, ERROR, ...), an exception or
warning class (`ValueError:`, `UserWarning:`) or starts a traceback; a traceback is reported by
its last line, the exception. Our own lines (`[swerve] ...`) are left alone: the code that
prints them already chose between the console and the log. What stays in the log only is
listed in EXPECTED, each with the reason it needs nobody.
"""
from __future__ import annotations

import re
OWN = "[swerve] "
_ALARM = re.compile(
    r"\b(?:WARNING|WARN|ERROR|CRITICAL|FATAL)\b"
    r"|\w(?:Error|Exception|Warning)\b(?::|$)"
    r"|\b(?:[Ww]arning|[Ee]rror|[Ff]atal)\s*:"
    r"|running low on memory|out of memory|OutOfMemory|Killed process"
)
_TRACEBACK = "Traceback (most recent call last):"
EXPECTED = [re.compile(p) for p in (
    # Ray's notice that its private cluster uses token auth: nothing to do.
    r"Token authentication is enabled for this Ray cluster",
    # Ray's note on start-up concurrency: the CPU spine starts every episode actor at once, by design.
    r"PYTHON worker processes have been started on node",
    # An actor ended on purpose (a stage's end, a replaced engine or episode actor); a death that
    # is not on purpose is replaced and counted by the run itself (accounting.json, the fault report).
    r"A worker died or was killed while executing a task by an unexpected system error",
    r"RayActorError|ActorDiedError|ActorUnavailableError",
    r"The actor died because|The actor is dead because|was killed by `ray.kill",
    # Ray's hint to silence its unhandled-error notices of the same kills.
    r"Unhandled error \(suppress with",
    # Ray's own metrics agent when a port it tried is taken: it picks another.
    r"Failed to (?:start|connect to) (?:the )?metrics",
)]
# Past this many distinct warnings the console says once that more are in the log.
MAX_SURFACED = 20
_RAY_PREFIX = re.compile(r"^(?:\x1b\[[0-9;]*m)?\((?:[\w.:-]+(?: pid=\d+)?(?:, ip=[\d.]+)?)\)(?:\x1b\[[0-9;]*m)? ?")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_VARYING = re.compile(r"0x[0-9a-f]+|[0-9a-f]{16,}|\d+(?:\.\d+)?")
_TIMESTAMP = re.compile(r"^\[?\d{4}-\d\d-\d\d[ T][\d:,.]+\]?\s*")
MAX_CHARS = 300


def _body(line: str) -> str:
    """The line as its writer wrote it: without colours and Ray's `(role pid=N)` prefix."""
    return _RAY_PREFIX.sub("", _ANSI.sub("", line))


class Watch:
    """Fed the log line by line; returns the lines to put before the human, each kind once."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.in_traceback = False
        self.surfaced = 0

    def feed(self, line: str) -> list[str]:
        body = _body(line)
        text = _TIMESTAMP.sub("", body).strip()
        if not text or line.startswith(OWN):
            return []
        if text.startswith(_TRACEBACK):
            self.in_traceback = True
            return []
        if self.in_traceback:
            # The frames are indented; the first line that is not is the exception itself.
            if body[:1].isspace() or text.startswith(("^", "~")):
                return []
            self.in_traceback = False
            return self._once(text)
        return self._once(text) if _ALARM.search(text) else []

    def _once(self, text: str) -> list[str]:
        if any(p.search(text) for p in EXPECTED):
            return []
        key = _VARYING.sub("#", text)
        if key in self.seen:
            return []
        self.seen.add(key)
        self.surfaced += 1
        if self.surfaced > MAX_SURFACED:
            return ["more warnings than the console shows; they are in the log"] if self.surfaced == MAX_SURFACED + 1 \
                else []
        return [text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + " ..."]
