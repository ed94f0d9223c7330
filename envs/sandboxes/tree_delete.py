"""Background deletion of what an agent left: never walked by this process.

`rm -rf` (GNU: iterative) deletes a tree in the background; the lease that made it waits for
its own deletions on close (bounded), interpreter exit for any left.
"""
from __future__ import annotations

import atexit
import logging
import os
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import List, Optional

log = logging.getLogger(__name__)

# Makes every folder of the tree readable and writable (the agent may have chmod'ed them 000),
# then deletes it. chmod -R never follows a link met inside the tree; the operand itself is a
# real folder (checked before). Both are fts-based: no recursion, no PATH_MAX limit.
_DELETE_TREE = 'chmod -R u+rwx -- "$1" 2>/dev/null; exec rm -rf -- "$1"'
# Deleters running at once; past that, reset and close wait for the oldest (up to DELETE_WAIT_S).
_MAX_DELETERS = 8
DELETE_WAIT_S = 60.0
# How long close() waits for its lease's files to be gone before it leaves them to finish alone.
CLOSE_WAIT_S = 30.0
_deleters: List[subprocess.Popen] = []
_deleters_lock = threading.Lock()


def _reap_deleters(wait_s: float = 0.0, only: Optional[List[subprocess.Popen]] = None) -> List[str]:
    """Forget finished deleters (logging failed ones), waiting up to wait_s in all for running
    ones (of `only`, when given); the trees still being deleted after that."""
    deadline_s = time.monotonic() + wait_s
    with _deleters_lock:
        pending = [deleter for deleter in _deleters if only is None or deleter in only]
    running = []
    for deleter in pending:
        try:
            code = deleter.wait(max(0.0, deadline_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            running.append(deleter)
            continue
        if code != 0:
            log.warning("deleting %s exited %d: some of it may remain", deleter.args[-1], code)
        with _deleters_lock:
            if deleter in _deleters:  # another thread may have reaped it meanwhile
                _deleters.remove(deleter)
    return [deleter.args[-1] for deleter in running]


def wait_for_deleters(timeout_s: float = DELETE_WAIT_S) -> List[str]:
    """Wait up to timeout_s for every background deletion; logs and returns the trees still going."""
    running = _reap_deleters(timeout_s)
    if running:
        log.warning("still deleting after %.0f s (left to finish on their own): %s", timeout_s, running)
    return running


atexit.register(wait_for_deleters)


def discard_tree(path: Path) -> Optional[subprocess.Popen]:
    """Delete what the agent may have made at `path`, in the background (no walk here); the
    deleter, None when there was nothing to walk."""
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(path)  # never hand a link to chmod -R, which would follow it
        return None
    _reap_deleters()
    with _deleters_lock:
        crowded = len(_deleters) >= _MAX_DELETERS
    if crowded:
        slow = _reap_deleters(DELETE_WAIT_S)
        if len(slow) >= _MAX_DELETERS:
            log.warning("%d deletions still running after %.0f s: %s", len(slow), DELETE_WAIT_S, slow)
    deleter = subprocess.Popen(["/bin/sh", "-c", _DELETE_TREE, "sh", str(path)], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    with _deleters_lock:
        _deleters.append(deleter)
    return deleter
