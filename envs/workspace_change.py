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

MANIFEST_TIMEOUT_S = 60.0
_MANIFEST_SCRIPT = r"""
import hashlib, json, os, stat
out = {}
for root, dirs, files in os.walk(".", followlinks=False):
    dirs[:] = [d for d in dirs if d not in (".git", ".hg")]
    for name in dirs + files:
        path = os.path.join(root, name)[2:]
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            out[path] = ["l", os.readlink(path)]
        elif stat.S_ISREG(info.st_mode):
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            out[path] = ["f", digest.hexdigest()[:24] + ("x" if info.st_mode & 0o111 else "")]
print(json.dumps(out, separators=(",", ":")))
"""


@dataclass(frozen=True)
class Manifest:
    # Workspace-relative path -> ("f", digest) for a regular file, ("l", target) for a symlink.
    entries: Dict[str, Tuple[str, str]] = field(default_factory=dict)

    @property
    def symlinks(self) -> set[str]:
        return {path for path, (kind, _) in self.entries.items() if kind == "l"}


@dataclass(frozen=True)
class Change:
    # Path -> True when the agent created it, False when it modified a pristine one.
    written: Dict[str, bool]
    deleted: Tuple[str, ...]
    # New or changed symlinks (never carried into the graded view).
    symlinks: Tuple[str, ...]

    @property
    def paths(self) -> Dict[str, bool]:
        """Every changed path -> is_new (a deletion counts as a change to a pristine path)."""
        return {**self.written, **{path: False for path in self.deleted}}


def take_manifest(sandbox: Sandbox) -> Manifest:
    result = sandbox.exec(f"python3 -I -S -c {shlex.quote(_MANIFEST_SCRIPT)}", timeout_s=MANIFEST_TIMEOUT_S)
    if result.exit_code != 0 or result.output_truncated:
        raise InfraError(InfraSource.GRADER, f"cannot list the workspace (exit {result.exit_code}, "
                         f"truncated={result.output_truncated}): {result.output[-500:]}")
    try:
        raw = json.loads(result.output.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as error:
        raise InfraError(InfraSource.GRADER, f"workspace listing is not JSON: {error}") from error
    return Manifest({path: (kind, value) for path, (kind, value) in raw.items()})


def diff_manifests(before: Manifest, after: Manifest) -> Change:
    written, symlinks = {}, []
    for path, entry in after.entries.items():
        if before.entries.get(path) == entry:
            continue
        if entry[0] == "l":
            symlinks.append(path)
        else:
            written[path] = path not in before.entries
    deleted = tuple(sorted(path for path in before.entries if path not in after.entries))
    return Change(written=dict(sorted(written.items())), deleted=deleted, symlinks=tuple(sorted(symlinks)))
