"""What the agent changed in its workspace, seen through the Sandbox protocol (every backend).

A manifest lists every file and symlink under the workspace (version-control data excepted:
`reset` restores it and it is protected anyway) with a content digest. The one taken when the
episode starts is the trust anchor: it is held by the environment, outside the sandbox, so
nothing the agent does inside can alter what "pristine" means.

The manifest is computed by the sandbox's Python in isolated mode (`-I -S`: no current
directory, user site or PYTHON* variable on its path), so a module the agent planted in the
workspace cannot fake it. Whatever the agent left (a deep or huge tree, odd names, FIFOs,
sparse files of terabytes) the listing ends within env.swe's bounds, as a manifest or as a
ListingError naming the bound: the agent's outcome, never an infra error.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Dict, Tuple

from configs.schema import SWEEnvConfig
from envs.tasks.hostile_json import HostileJSONError, load_bounded
from envs.outcomes import InfraError, InfraSource
from envs.sandboxes.sandbox import Sandbox

# Iterative (no os.walk: deep trees), bytes names (non-UTF-8 ones), lstat-based (no link is
# followed, no FIFO or device opened). A file is hashed only when it is regular and small; an
# entry the listing cannot read (permissions the agent changed, a name that is not UTF-8) is
# recorded as ("e", why) under a printable key, so it shows as a change instead of failing.
# Prints one JSON line (ASCII): {"entries": {path: [kind, value(, size)]}} or {"stop": [bound, n]}.
_MANIFEST_SCRIPT = r"""
import hashlib, json, os, stat, sys
max_entries, max_depth, max_path_bytes, max_file_bytes = map(int, sys.argv[1:5])
out = {}
def record(key, entry):
    if entry[0] == "e" or out.get(key, ("",))[0] != "e":
        out[key] = entry
def stop(bound, limit):
    print(json.dumps({"stop": [bound, limit]}))
    sys.exit(0)
def digest_of(path):
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_file_bytes:
            return None
        digest = hashlib.sha256()
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
        return digest.hexdigest()[:24] + ("x" if info.st_mode & 0o111 else "")
count = 0
stack = [(b".", "", 0)]
while stack:
    folder, prefix, depth = stack.pop()
    try:
        with os.scandir(folder) as listing:
            for item in listing:
                count += 1
                if count > max_entries:
                    stop("entries", max_entries)
                raw = folder + b"/" + item.name if folder != b"." else item.name
                if len(raw) > max_path_bytes:
                    stop("path", max_path_bytes)
                if depth + 1 > max_depth:
                    stop("depth", max_depth)
                try:
                    key = prefix + item.name.decode("utf-8")
                except UnicodeDecodeError:
                    record(prefix + item.name.decode("utf-8", "backslashreplace"), ["e", "name is not UTF-8"])
                    continue
                try:
                    info = item.stat(follow_symlinks=False)
                    if stat.S_ISDIR(info.st_mode):
                        if item.name not in (b".git", b".hg"):
                            stack.append((raw, key + "/", depth + 1))
                    elif stat.S_ISLNK(info.st_mode):
                        target = os.readlink(raw)
                        try:
                            record(key, ["l", target.decode("utf-8")])
                        except UnicodeDecodeError:
                            record(key, ["e", "link target is not UTF-8"])
                    elif stat.S_ISREG(info.st_mode):
                        digest = digest_of(raw) if info.st_size <= max_file_bytes else None
                        if digest is None:
                            record(key, ["big", str(info.st_size)])
                        else:
                            record(key, ["f", digest, info.st_size])
                except OSError as error:
                    record(key, ["e", type(error).__name__])
    except OSError as error:
        record(prefix[:-1] or ".", ["e", type(error).__name__])
print(json.dumps({"entries": out}, separators=(",", ":")))
"""

# What the script's "stop" names -> how the message says it and the env.swe field that bounds it.
_BOUNDS = {"entries": ("more than {} entries", "listing_max_entries"),
           "depth": ("folders nested deeper than {}", "listing_max_depth"),
           "path": ("a path longer than {} bytes", "max_path_bytes")}
# {"entries": {path: [kind, value, size]}} is 3 deep. The listing's size is bounded by
# sandbox.max_output_bytes (a truncated one is a ListingError); this only keeps the parse bounded.
_LISTING_MAX_DEPTH = 3
_LISTING_MAX_BYTES = 1 << 30


class ListingError(Exception):
    """The workspace cannot be listed within the bounds on what the agent leaves (time, output
    bytes, entries, depth, path bytes): the agent's doing, never an infra error."""


@dataclass(frozen=True)
class Manifest:
    # Workspace-relative path -> ("f", digest) for a regular file, ("big", size) for one larger
    # than env.swe.max_file_bytes (never read: a sparse file can claim terabytes), ("l", target)
    # for a symlink, ("e", why) for an entry the listing could not read or name.
    entries: Dict[str, Tuple[str, str]] = field(default_factory=dict)
    # Path -> bytes of each regular file (small or big). Not compared: entries say it all.
    sizes: Dict[str, int] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Change:
    # Path -> True when the agent created it, False when it modified a pristine one.
    written: Dict[str, bool]
    deleted: Tuple[str, ...]
    # New or changed symlinks, and entries the listing could not read (never carried into the
    # graded view).
    symlinks: Tuple[str, ...]
    unreadable: Tuple[str, ...] = ()
    # New or changed files larger than env.swe.max_file_bytes: never read, never in `written`.
    oversized: Tuple[str, ...] = ()

    @property
    def paths(self) -> Dict[str, bool]:
        """Every changed path -> is_new (a deletion counts as a change to a pristine path)."""
        return {**self.written, **{path: False for path in self.deleted}}


def manifest_command(config: SWEEnvConfig) -> str:
    bounds = (config.listing_max_entries, config.listing_max_depth, config.max_path_bytes, config.max_file_bytes)
    return f"python3 -I -S -c {shlex.quote(_MANIFEST_SCRIPT)} {' '.join(str(int(bound)) for bound in bounds)}"


def take_manifest(sandbox: Sandbox, config: SWEEnvConfig) -> Manifest:
    """The workspace's listing within env.swe's bounds (listing_timeout_s, listing_max_entries,
    listing_max_depth, max_path_bytes) and the sandbox's output limit. ListingError when the
    workspace exceeds one (what the agent can cause); InfraError when the listing itself fails."""
    timeout_s = config.listing_timeout_s
    result = sandbox.exec(manifest_command(config), timeout_s=timeout_s)
    if result.timed_out or result.output_truncated:
        raise ListingError(f"listing the workspace {'timed out' if result.timed_out else 'exceeded'} "
                           f"the limits ({timeout_s:.0f} s env.swe.listing_timeout_s, sandbox.max_output_bytes)")
    if result.exit_code != 0:
        raise InfraError(InfraSource.GRADER, f"cannot list the workspace (exit {result.exit_code}): "
                         f"{result.output[-500:]}")
    lines = result.output.strip().splitlines()
    try:
        raw = load_bounded(lines[-1] if lines else "", _LISTING_MAX_BYTES, _LISTING_MAX_DEPTH)
    except HostileJSONError as error:
        raise InfraError(InfraSource.GRADER, f"workspace listing is not JSON: {error}") from error
    return _manifest(raw)


def _manifest(raw) -> Manifest:
    """The listing script's JSON as a Manifest. The script is ours and run isolated, so a shape
    other than its own is the machinery's failure, said clearly rather than a TypeError."""
    if isinstance(raw, dict) and isinstance(raw.get("stop"), list) and len(raw["stop"]) == 2 \
            and raw["stop"][0] in _BOUNDS:
        bound, limit = raw["stop"]
        text, name = _BOUNDS[bound]
        raise ListingError(f"the workspace holds {text.format(limit)} (env.swe.{name})")
    listed = raw.get("entries") if isinstance(raw, dict) else None
    if not isinstance(listed, dict):
        raise InfraError(InfraSource.GRADER, f"workspace listing has no entries: {str(raw)[:300]}")
    entries, sizes = {}, {}
    for path, entry in listed.items():
        if not (isinstance(entry, list) and 2 <= len(entry) <= 3 and all(isinstance(x, str) for x in entry[:2])
                and all(isinstance(x, int) for x in entry[2:])):
            raise InfraError(InfraSource.GRADER, f"workspace listing entry {path!r} is malformed: {str(entry)[:200]}")
        kind, value, *size = entry
        entries[path] = (kind, value)
        if kind == "big":
            sizes[path] = int(value)
        elif size:
            sizes[path] = size[0]
    return Manifest(entries, sizes)


def diff_manifests(before: Manifest, after: Manifest) -> Change:
    written, other = {}, {"l": [], "e": [], "big": []}
    for path, entry in after.entries.items():
        if before.entries.get(path) == entry:
            continue
        if entry[0] in other:
            other[entry[0]].append(path)
        else:
            written[path] = path not in before.entries
    deleted = tuple(sorted(path for path in before.entries if path not in after.entries))
    return Change(written=dict(sorted(written.items())), deleted=deleted, symlinks=tuple(sorted(other["l"])),
                  unreadable=tuple(sorted(other["e"])), oversized=tuple(sorted(other["big"])))
