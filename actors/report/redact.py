"""Secrets never leave the process: find them, and blank them in text and nested objects.

A secret is
- the value (REDACTED_MIN_CHARS or longer) of an environment variable whose name looks secret
  (*_API_KEY, *_TOKEN, *_SECRET*, *PASSWORD*, *_ACCESS_KEY_ID, *_CREDENTIALS, ...), and the Ray
  auth token file's content;
- text shaped like a well-known key (sk-..., hf_..., e2b_..., ghp_..., AKIA..., Bearer ...,
  private-key blocks, the password of user:password@ in a URL);
- in a mapping or a dataclass, any string under a secret-looking key or field name.

`redact(obj)` is applied where text is written (actors/report/run_dir.py, actors/stages/evaluate.py);
`install()` covers log records of every logger and what this process prints.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import sys
from typing import Any, Iterable, TextIO

REDACTED = "[REDACTED]"
# Shorter values of secret-named variables ("true", "token", a port) are settings, not secrets,
# and blanking them everywhere would mangle ordinary text.
REDACTED_MIN_CHARS = 8
# Whether install() has put the redacting LogRecord factory in place (once per process).
_factory_installed = False

_SECRET_NAME = re.compile(
    r"(?:^|[_.-])(?:API[_-]?KEY|ACCESS[_-]?KEY(?:[_-]?ID)?|TOKEN|AUTH|PRIVATE[_-]?KEY|CREDENTIALS?)$"
    r"|PASSWORD|PASSWD|PASSPHRASE|SECRET",
    re.IGNORECASE,
)
# Where a secret is kept, not the secret itself (RAY_AUTH_TOKEN_PATH, AWS_SHARED_CREDENTIALS_FILE).
_SECRET_LOCATION = re.compile(r"_(?:PATH|FILE|DIR)$", re.IGNORECASE)
_SECRET_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"sk-[A-Za-z0-9_-]{16,}"  # OpenAI, Anthropic (sk-ant-...), sk-proj-...
    r"|e2b_[A-Za-z0-9]{16,}"
    r"|hf_[A-Za-z0-9]{16,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|A(?:KIA|SIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
    r")"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"
)
# The scheme word stays, so a reader still sees what kind of credential was there. Outside an
# Authorization header only a long Bearer value counts ("basic functionality" is prose).
_AUTH_HEADER = re.compile(
    r"(?i:(\bAuthorization[\"']?\s*[:=]\s*[\"']?(?:(?:Bearer|Basic|Token)\s+)?))[A-Za-z0-9._~+/=-]{8,}"
    r"|(\bBearer\s+)[A-Za-z0-9._~+/=-]{16,}"
)
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)[^/\s@]+@", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether a variable, key or field of this name holds a secret."""
    return bool(_SECRET_NAME.search(name)) and not _SECRET_LOCATION.search(name)


def secret_values(environ: dict | None = None) -> list[str]:
    """The secrets this process knows: secret-named environment values and the Ray auth token."""
    environ = os.environ if environ is None else environ
    found = {value for name, value in environ.items() if is_secret_name(name) and len(value) >= REDACTED_MIN_CHARS}
    token_path = environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    if os.path.isfile(token_path):
        token = _file_secret(token_path, os.stat(token_path).st_mtime_ns)
        if len(token) >= REDACTED_MIN_CHARS:
            found.add(token)
    return sorted(found, key=len, reverse=True)


@functools.lru_cache(maxsize=8)
def _file_secret(path: str, mtime_ns: int) -> str:
    """A secret file's stripped content, read again only when the file changes (`ray start` rewrites it)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read().strip()


@functools.lru_cache(maxsize=32)
def _values_pattern(values: tuple[str, ...]) -> re.Pattern | None:
    # Longest first, so a secret that contains another is blanked whole.
    return re.compile("|".join(map(re.escape, values))) if values else None


def redact_text(text: str, values: Iterable[str] | None = None) -> str:
    """`text` with every secret replaced by REDACTED; `values` defaults to secret_values()."""
    pattern = _values_pattern(tuple(secret_values() if values is None else values))
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    text = _SECRET_SHAPES.sub(REDACTED, text)
    text = _AUTH_HEADER.sub(lambda m: f"{m.group(1) or m.group(2)}{REDACTED}", text)
    return _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)


def redact_pieces(pieces: list[str], values: Iterable[str] | None = None) -> list[str]:
    """Text cut into pieces (a reply's tokens) with secrets blanked, the pieces kept aligned: a
    piece that holds any character of a secret becomes REDACTED (the first of a secret's pieces)
    or "" (the rest). A secret split across tokens is found whole, where blanking piece by piece
    would miss it."""
    text = "".join(pieces)
    if redact_text(text, values) == text:
        return list(pieces)
    secret = [False] * len(text)
    for start, end in _secret_spans(text, tuple(secret_values() if values is None else values)):
        secret[start:end] = [True] * (end - start)
    out, at, previous_blank = [], 0, False
    for piece in pieces:
        blank = any(secret[at:at + len(piece)])
        out.append(("" if previous_blank else REDACTED) if blank else piece)
        at, previous_blank = at + len(piece), blank
    return out


def _secret_spans(text: str, values: tuple[str, ...]) -> Iterable[tuple[int, int]]:
    """Where redact_text blanks something in `text`: (start, end) of each secret's characters."""
    pattern = _values_pattern(values)
    for found in (pattern.finditer(text) if pattern is not None else ()):
        yield found.span()
    for found in _SECRET_SHAPES.finditer(text):
        yield found.span()
    for found in _AUTH_HEADER.finditer(text):
        yield found.end(1) if found.group(1) else found.end(2), found.end()
    for found in _URL_PASSWORD.finditer(text):
        yield found.end(1), found.end() - 1


def redact(obj: Any, values: Iterable[str] | None = None) -> Any:
    """A copy of `obj` (str, mapping, list, tuple, dataclass, nested) with secrets blanked;
    other values come back as they are."""
    return _redact(obj, tuple(secret_values() if values is None else values))


def _redact(obj: Any, values: tuple[str, ...]) -> Any:
    if isinstance(obj, str):
        return redact_text(obj, values)
    if isinstance(obj, dict):
        return {_redact(k, values): _redact_named(str(k), v, values) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [_redact(item, values) for item in obj]
        return obj._make(items) if isinstance(obj, tuple) and hasattr(obj, "_make") else type(obj)(items)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: _redact_named(f.name, getattr(obj, f.name), values)
                   for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    return obj


def _redact_named(name: str, value: Any, values: tuple[str, ...]) -> Any:
    if isinstance(value, str) and value and is_secret_name(name):
        return REDACTED
    return _redact(value, values)


class SecretFilter(logging.Filter):
    """Blanks secrets in a log record's message (arguments merged in first), exception text
    and stack; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            # A broken format string: the handler reports it (logging's own error path) when it
            # formats the record, so it is left as it is here.
            return True
        clean = redact_text(message)
        if clean != message or record.args:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True


class RedactingStream:
    """A text stream (stdout, stderr) that blanks secrets in what is written through it."""

    def __init__(self, stream: TextIO):
        self.wrapped = stream

    def write(self, text: str) -> int:
        self.wrapped.write(redact_text(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


def install() -> None:
    """From now on every log record made in this process, and whatever is printed to stdout or
    stderr, is redacted (idempotent). Call it once where a process starts its work."""
    global _factory_installed
    if not _factory_installed:
        _factory_installed = True
        make_record, secret_filter = logging.getLogRecordFactory(), SecretFilter()

        def redacting_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = make_record(*args, **kwargs)
            secret_filter.filter(record)
            return record

        logging.setLogRecordFactory(redacting_factory)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, RedactingStream):
            setattr(sys, name, RedactingStream(stream))
