"""Content-addressed cache directories written atomically.

Several processes (engines, trainer shards) may build the same artifact at once. Each
builds into its own temporary directory next to the target and renames it into place;
rename of a directory is atomic, so readers see either nothing or a complete directory.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import Any, Callable, Dict


def content_hash(fields: Dict[str, Any]) -> str:
    encoded = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()[:16]


def build_once(final_dir: str, build: Callable[[str], None]) -> str:
    """Return final_dir, calling build(tmp_dir) to create it if it does not exist yet."""
    if os.path.isdir(final_dir):
        return final_dir
    parent = os.path.dirname(final_dir)
    os.makedirs(parent, exist_ok=True)
    tmp_dir = tempfile.mkdtemp(prefix=".tmp-", dir=parent)
    build(tmp_dir)
    try:
        os.rename(tmp_dir, final_dir)
    except OSError:
        # Another process won the race with an identical build; keep its copy.
        shutil.rmtree(tmp_dir)
        if not os.path.isdir(final_dir):
            raise
    return final_dir
