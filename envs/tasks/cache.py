"""Where envs keeps what it builds (task workspaces, quarantine files), and building a directory
there atomically.

Task workspaces are content-addressed (a directory's name holds a hash of what it was built
from), so a changed source gets a new directory and a finished one is never rewritten.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable


def cache_root() -> Path:
    """Root of swerve's caches: $SWERVE_CACHE_DIR, else ~/.cache/swerve."""
    return Path(os.environ.get("SWERVE_CACHE_DIR") or "~/.cache/swerve").expanduser()


def build_dir_once(final_dir: Path, build: Callable[[Path], None]) -> Path:
    """final_dir, built by build(staging) into a temporary sibling and renamed into place (atomic).

    A failed build leaves nothing behind; a concurrent identical build that wins the rename is kept.
    """
    if final_dir.is_dir():
        return final_dir
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final_dir.name}-", dir=final_dir.parent))
    try:
        build(staging / "out")
        try:
            os.rename(staging / "out", final_dir)
        except OSError:
            if not final_dir.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final_dir
