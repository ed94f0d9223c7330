"""The exec server's look at the jail's scratch space (envs/sandboxes/jail/exec_server.py scratch_listing),
on trees a command can leave in /tmp: it answers (a listing, or None for "dirty") and never
raises, whatever the depth, count, modes or names."""
import importlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import envs.sandboxes.jail

JAIL_DIR = os.path.dirname(envs.sandboxes.jail.__file__)


@pytest.fixture(scope="module")
def server():
    # The server imports its siblings by bare name, as it does in the jail.
    sys.path.insert(0, JAIL_DIR)
    try:
        yield importlib.import_module("exec_server")
    finally:
        sys.path.remove(JAIL_DIR)


@pytest.fixture(autouse=True)
def _remove_deep_trees(tmp_path):
    # pytest's own clean-up of old tmp dirs is recursive: it must never meet these trees.
    yield
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=True)


def _deep(root: Path, depth: int, name: str = "d") -> None:
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def test_a_small_tree_is_listed_with_link_targets_and_odd_names(server, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_text("x")
    os.symlink(b"/etc/\xff", bytes(tmp_path / "a") + b"/link")
    open(bytes(tmp_path) + b"/bad\xfe", "w").close()
    root = bytes(tmp_path)
    assert server.scratch_listing(root) == sorted([
        (root + b"/a", b""), (root + b"/a/f", b""), (root + b"/a/link", b"/etc/\xff"), (root + b"/bad\xfe", b"")])


@pytest.mark.slow
@pytest.mark.parametrize("depth", [63, 3000])
def test_depth_past_the_bound_is_dirty_not_a_crash(server, tmp_path, depth):
    _deep(tmp_path, depth)
    listing = server.scratch_listing(bytes(tmp_path))
    assert (listing is None) == (depth > 63)
    if listing is not None:
        assert len(listing) == depth


@pytest.mark.slow
def test_many_entries_are_dirty_after_the_bound(server, tmp_path):
    for index in range(server._SCRATCH_MAX_ENTRIES + 1):
        (tmp_path / str(index)).touch()
    started_s = time.monotonic()
    assert server.scratch_listing(bytes(tmp_path)) is None
    print(f"scratch listing stopped at {server._SCRATCH_MAX_ENTRIES} entries in {time.monotonic() - started_s:.3f} s")


def test_an_unlistable_folder_or_root_is_dirty(server, tmp_path):
    assert server.scratch_listing(bytes(tmp_path / "missing")) is None
    # As root a chmod 000 folder stays readable; a name past PATH_MAX never does.
    _deep(tmp_path, 30, "p" * 200)
    assert server.scratch_listing(bytes(tmp_path)) is None


@pytest.mark.slow
def test_unchanged_scratch_space_is_clean_and_changed_is_not(server, tmp_path, monkeypatch):
    monkeypatch.setattr(server, "_SCRATCH_ROOTS", (bytes(tmp_path),))
    at_start = [server.scratch_listing(bytes(tmp_path))]
    assert server.jail_clean(at_start) is (not server.sysv_objects())
    _deep(tmp_path, 3000)
    assert server.jail_clean(at_start) is False
