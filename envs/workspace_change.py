"""What the agent changed in its workspace, seen through the Sandbox protocol (every backend).

A manifest lists every file and symlink under the workspace (version-control data excepted:
`reset` restores it and it is protected anyway) with a content digest. The one taken when the
episode starts is the trust anchor: it is held by the environment, outside the sandbox, so
nothing the agent does inside can alter what "pristine" means.

The manifest is computed by the sandbox's Python in isolated mode (`-I -S`: no current
directory, user site or PYTHON* variable on its path), so a module the agent planted in the
workspace cannot fake it.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Dict, Tuple

from envs.outcomes import InfraError, InfraSource
from envs.sandbox import Sandbox

# An entry the listing cannot read (permissions the agent changed) is recorded as ("e", why),
# so it shows as a change instead of failing the listing.
_MANIFEST_SCRIPT = r"""
import hashlib, json, os, stat
out = {}
def unreadable(error):
    out[os.path.relpath(error.filename or ".", ".")] = ["e", type(error).__name__]
for root, dirs, files in os.walk(".", onerror=unreadable, followlinks=False):
    dirs[:] = [d for d in dirs if d not in (".git", ".hg")]
    for name in dirs + files:
        path = os.path.join(root, name)[2:]
        try:
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                out[path] = ["l", os.readlink(path)]
            elif stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256()
                with open(path, "rb") as handle:
                    for block in iter(lambda: handle.read(1 << 20), b""):
                        digest.update(block)
                out[path] = ["f", digest.hexdigest()[:24] + ("x" if info.st_mode & 0o111 else "")]
        except OSError as error:
            out[path] = ["e", type(error).__name__]
print(json.dumps(out, separators=(",", ":")))
"""


class ListingError(Exception):
    """The workspace cannot be listed within the sandbox's limits (time, output bytes)."""


@dataclass(frozen=True)
class Manifest:
    # Workspace-relative path -> ("f", digest) for a regular file, ("l", target) for a symlink,
    # ("e", error) for an entry the listing could not read.
    entries: Dict[str, Tuple[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Change:
    # Path -> True when the agent created it, False when it modified a pristine one.
    written: Dict[str, bool]
    deleted: Tuple[str, ...]
    # New or changed symlinks, and entries the listing could not read (never carried into the
    # graded view).
    symlinks: Tuple[str, ...]
    unreadable: Tuple[str, ...] = ()

    @property
    def paths(self) -> Dict[str, bool]:
        """Every changed path -> is_new (a deletion counts as a change to a pristine path)."""
        return {**self.written, **{path: False for path in self.deleted}}


def take_manifest(sandbox: Sandbox, timeout_s: float) -> Manifest:
    """The workspace's listing, within timeout_s (env.swe.listing_timeout_s). ListingError when it
    exceeds that or the sandbox's output limit (what the agent can cause: a flood of files);
    InfraError when the listing itself fails."""
    result = sandbox.exec(f"python3 -I -S -c {shlex.quote(_MANIFEST_SCRIPT)}", timeout_s=timeout_s)
    if result.timed_out or result.output_truncated:
        raise ListingError(f"listing the workspace {'timed out' if result.timed_out else 'exceeded'} "
                           f"the limits ({timeout_s:.0f} s env.swe.listing_timeout_s, sandbox.max_output_bytes)")
    if result.exit_code != 0:
        raise InfraError(InfraSource.GRADER, f"cannot list the workspace (exit {result.exit_code}): "
                         f"{result.output[-500:]}")
    try:
        raw = json.loads(result.output.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as error:
        raise InfraError(InfraSource.GRADER, f"workspace listing is not JSON: {error}") from error
    return Manifest({path: (kind, value) for path, (kind, value) in raw.items()})


def diff_manifests(before: Manifest, after: Manifest) -> Change:
    written, other = {}, {"l": [], "e": []}
    for path, entry in after.entries.items():
        if before.entries.get(path) == entry:
            continue
        if entry[0] in other:
            other[entry[0]].append(path)
        else:
            written[path] = path not in before.entries
    deleted = tuple(sorted(path for path in before.entries if path not in after.entries))
    return Change(written=dict(sorted(written.items())), deleted=deleted, symlinks=tuple(sorted(other["l"])),
                  unreadable=tuple(sorted(other["e"])))
