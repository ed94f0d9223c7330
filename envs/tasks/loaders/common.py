"""Helpers shared by the row loaders: reading row files, checking fields, reversing diffs,
hashing a repository tree. (Cache directories: envs/tasks/cache.py.)"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Iterator, List, Sequence, Tuple

from envs.tasks.task import ALL_SPLITS, DEFAULT_SPLIT, SkippedRow, TaskSet

ROW_SUFFIXES = (".jsonl", ".json", ".parquet")


class RowError(ValueError):
    """A malformed row: names the field and why."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"field {field!r}: {reason}")
        self.field = field
        self.reason = reason


def row_files(path: Path) -> List[Path]:
    """The row file itself, or every row file under a directory (sorted)."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(ROW_SUFFIXES))


def read_rows(path: Path) -> Iterator[Tuple[str, Any]]:
    """(row label, row) for each row of each row file; a row that is not valid JSON comes as a RowError."""
    for file in row_files(path):
        if file.name.endswith(".parquet"):
            yield from _parquet_rows(file)
        elif file.name.endswith(".jsonl"):
            # Bytes, decoded line by line: one line of binary garbage must not hide the others.
            with open(file, "rb") as handle:
                for number, raw in enumerate(handle, 1):
                    if not raw.strip():
                        continue
                    yield f"{file.name}:{number}", _json_row(raw, "line")
        else:
            data = _json_row(file.read_bytes(), "file")
            if isinstance(data, RowError):
                yield file.name, data
                continue
            rows = data if isinstance(data, list) else [data]
            for number, row in enumerate(rows, 1):
                yield f"{file.name} row {number}", row


def _json_row(raw: bytes, unit: str) -> Any:
    """The parsed JSON of one line or file, or a RowError saying why it is not JSON."""
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        return RowError("json", f"not a JSON {unit}: invalid UTF-8 at byte {error.start} (binary data?)")
    except json.JSONDecodeError as error:
        return RowError("json", f"not a JSON {unit}: {error}")


def _parquet_rows(file: Path) -> Iterator[Tuple[str, Any]]:
    try:  # optional dependency: only parquet row files need pyarrow
        import pyarrow
        import pyarrow.parquet as pq
    except ImportError as error:
        raise ImportError(f"reading {file} needs pyarrow (pip install pyarrow)") from error
    try:
        table = pq.read_table(file)
    except pyarrow.ArrowException as error:
        # One unreadable file of a directory of row files must not hide the others' rows.
        yield file.name, RowError("parquet", f"not a readable parquet file: {error}")
        return
    for number, row in enumerate(table.to_pylist(), 1):
        yield f"{file.name} row {number}", row


def sniff_keys(path: Path, limit: int = 20) -> set:
    """Keys of the first few rows that parsed as JSON objects (for format detection)."""
    keys: set = set()
    for seen, (_, row) in enumerate(read_rows(path)):
        if isinstance(row, dict):
            keys.update(row)
        if seen + 1 >= limit:
            break
    return keys


def label(where: str, row: Any) -> str:
    ident = row.get("instance_id") if isinstance(row, dict) else None
    return f"{where} ({ident})" if isinstance(ident, str) and ident else where


def require_str(row: dict, name: str, allow_empty: bool = True) -> str:
    if name not in row or row[name] is None:
        raise RowError(name, "missing")
    value = row[name]
    if not isinstance(value, str):
        raise RowError(name, f"expected a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise RowError(name, "empty")
    return value


def optional_str(row: dict, name: str, default: str = "") -> str:
    value = row.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise RowError(name, f"expected a string, got {type(value).__name__}")
    return value


def test_list(row: dict, name: str) -> Tuple[str, ...]:
    """A list of test ids, given as a list or as a JSON-encoded string of one."""
    if name not in row or row[name] is None:
        raise RowError(name, "missing")
    value = row[name]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise RowError(name, f"not a JSON-encoded list: {error}") from None
    if hasattr(value, "tolist"):  # numpy arrays from some parquet readers
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise RowError(name, f"expected a list of strings, got {type(value).__name__}")
    return tuple(value)


def path_globs(row: dict) -> dict:
    """A row's override of its format's protection policy (envs/grading/protection.py), as Task fields."""
    return {name: test_list(row, name) if row.get(name) is not None else ()
            for name in ("protected_paths", "unprotected_paths")}


def row_split(row: dict) -> str:
    return optional_str(row, "split") or DEFAULT_SPLIT


def selected(task_split: str, task_id: str, split: str, ids: Sequence[str]) -> bool:
    return (split == ALL_SPLITS or task_split == split) and (not ids or task_id in ids)


def reverse_patch(diff: str) -> str:
    """The reverse of a unified diff, computed from its text alone (what `patch -R` applies)."""
    out = []
    lines = diff.splitlines(keepends=True)
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("--- ") and index + 1 < len(lines) and lines[index + 1].startswith("+++ "):
            old, new = line[4:], lines[index + 1][4:]
            out += [f"--- {_swap_prefix(new, 'b/', 'a/')}", f"+++ {_swap_prefix(old, 'a/', 'b/')}"]
            index += 2
            continue
        if line.startswith("@@"):
            head, _, tail = line[2:].partition("@@")
            parts = head.split()
            if len(parts) == 2 and parts[0].startswith("-") and parts[1].startswith("+"):
                line = f"@@ -{parts[1][1:]} +{parts[0][1:]} @@{tail}"
        elif line.startswith("diff --git "):
            words = line[len("diff --git "):].rstrip("\n").split(" ")
            if len(words) == 2:
                line = f"diff --git {_swap_prefix(words[1], 'b/', 'a/')} {_swap_prefix(words[0], 'a/', 'b/')}\n"
        elif line.startswith("new file mode"):
            line = "deleted" + line[len("new"):]
        elif line.startswith("deleted file mode"):
            line = "new" + line[len("deleted"):]
        elif line.startswith("rename from "):
            line = "rename to " + line[len("rename from "):]
        elif line.startswith("rename to "):
            line = "rename from " + line[len("rename to "):]
        elif line.startswith("index ") and ".." in line:
            words = line.split(" ")
            left, _, right = words[1].partition("..")
            words[1] = f"{right}..{left}" if len(words) > 2 else f"{right.rstrip()}..{left}\n"
            line = " ".join(words)
        elif line.startswith("-"):
            line = "+" + line[1:]
        elif line.startswith("+"):
            line = "-" + line[1:]
        out.append(line)
        index += 1
    return "".join(out)


def _swap_prefix(path: str, old: str, new: str) -> str:
    return new + path[len(old):] if path.startswith(old) else path


def tree_hash(root: Path, ignore: Callable[[Path], bool]) -> str:
    """Hash of every file's relative path and bytes under root (ignored paths left out)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if ignore(relative) or not path.is_file():
            continue
        digest.update(relative.as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def skip(where: str, row: Any, error: RowError) -> SkippedRow:
    return SkippedRow(row=label(where, row), field=error.field, reason=error.reason)


def collect_rows(path: Path, row_to_task: Callable[[dict], Any], split: str, ids: Sequence[str]) -> TaskSet:
    """Every row of path through row_to_task: bad and duplicate rows skipped (named), the rest
    kept when they match split/ids. Returns a TaskSet."""
    result = TaskSet()
    seen: dict = {}
    for where, row in read_rows(path):
        try:
            if isinstance(row, RowError):
                raise row
            task = row_to_task(row)
        except RowError as error:
            result.skipped.append(skip(where, row, error))
            continue
        if task.id in seen:
            result.skipped.append(SkippedRow(f"{where} ({task.id})", "instance_id",
                                             f"duplicate of {seen[task.id]} (the first row is kept; "
                                             "remove this row or give it a unique id)"))
            continue
        seen[task.id] = where
        result.splits.add(task.split)
        if selected(task.split, task.id, split, ids):
            result.tasks.append(task)
    return result


# SWE-bench's and SWE-smith's images keep the repository's interpreter in a conda env that a
# non-interactive bash does not activate (their Dockerfiles put it in ~/.bashrc). A task's setup
# runs it once and its variables reach every command (envs/sandboxes/container_sandbox.py); an image
# without that env (the shipped swerve-task images) keeps its own interpreter.
ACTIVATE_TESTBED = ("if [ -f /opt/miniconda3/bin/activate ]; then "
                    ". /opt/miniconda3/bin/activate && conda activate testbed; fi")
