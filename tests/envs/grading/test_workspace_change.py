"""The workspace listing (envs/grading/workspace_change.py) against what an agent can leave behind, in
real sandboxes: every case ends as a manifest or a ListingError naming its bound, never as an
InfraError or a crash."""
import json
import time

import pytest

from configs.schema import SWEEnvConfig
from envs.grading.workspace_change import ListingError, Manifest, diff_manifests, take_manifest
from envs.outcomes import InfraError
from envs.sandboxes.sandbox import ExecResult
from tests.envs.conftest import needs_bwrap

SMALL = SWEEnvConfig(listing_timeout_s=60.0)
# A chain of 3000 folders (bash's own `cd` slows down with depth: Python makes it in a blink).
DEEP_TREE = "python3 -c 'import os; [(os.mkdir(\"d\"), os.chdir(\"d\")) for _ in range(3000)]'"


@pytest.fixture
def box(make_sandbox, isolation, task_by_id):
    sandbox = make_sandbox(isolation=isolation)
    sandbox.start(task_by_id["textkit-001"])
    return sandbox


@pytest.fixture
def jailed(make_sandbox, task_by_id):
    # A file size limit that lets a sparse file claim a terabyte.
    sandbox = make_sandbox(isolation="bwrap", max_file_mb=1 << 21)
    sandbox.start(task_by_id["textkit-001"])
    return sandbox


def _ok(box, command: str) -> None:
    result = box.exec(command, timeout_s=120)
    assert result.exit_code == 0, result.output[-2000:]


def test_the_pristine_listing_has_digests_and_sizes(box):
    manifest = take_manifest(box, SMALL)
    kind, _ = manifest.entries["textkit/case.py"]
    assert kind == "f" and manifest.sizes["textkit/case.py"] == len(box.read_files(["textkit/case.py"])["textkit/case.py"].encode())
    assert not any(path.startswith(".git/") for path in manifest.entries)
    # Sizes never decide equality: a manifest built from entries alone equals the listing.
    assert Manifest(dict(manifest.entries)) == manifest and take_manifest(box, SMALL) == manifest


@pytest.mark.slow
def test_each_bound_stops_the_listing_with_its_config_field(box):
    pristine = take_manifest(box, SMALL)
    _ok(box, DEEP_TREE)
    with pytest.raises(ListingError, match=r"deeper than 128 \(env.swe.listing_max_depth\)"):
        take_manifest(box, SMALL)
    _ok(box, "rm -rf d && mkdir many && cd many && seq 500 | xargs touch")
    with pytest.raises(ListingError, match=r"more than 300 entries \(env.swe.listing_max_entries\)"):
        take_manifest(box, SWEEnvConfig(listing_max_entries=300))
    long_name = "n" * 200
    _ok(box, f"rm -rf many && mkdir -p {'/'.join([long_name] * 6)}")
    with pytest.raises(ListingError, match=r"longer than 1024 bytes \(env.swe.max_path_bytes\)"):
        take_manifest(box, SMALL)
    _ok(box, f"rm -rf {long_name}")
    assert take_manifest(box, SMALL) == pristine


@needs_bwrap
def test_a_path_longer_than_path_max_is_a_listing_error(jailed):
    _ok(jailed, "for i in $(seq 40); do mkdir " + "p" * 200 + " && cd " + "p" * 200 + " || exit 1; done")
    started_s = time.monotonic()
    with pytest.raises(ListingError, match="max_path_bytes"):
        take_manifest(jailed, SMALL)
    # Even a bound above PATH_MAX: the folder it cannot open is an entry, not a crash.
    loose = SWEEnvConfig(max_path_bytes=1 << 20, listing_max_depth=1000)
    manifest = take_manifest(jailed, loose)
    assert any(kind == "e" for kind, _ in manifest.entries.values())
    print(f"listing a path of 8 kB: {time.monotonic() - started_s:.2f} s")


@needs_bwrap
def test_odd_entries_are_listed_without_reading_them(jailed):
    pristine = take_manifest(jailed, SMALL)
    _ok(jailed, "mkfifo pipe && python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")' && "
                "truncate -s 1T sparse.bin && head -c 4194305 /dev/zero > just_over && "
                "head -c 4194304 /dev/zero > at_limit && touch $'bad\\xffname' && ln -s $'\\xfe' badlink && "
                "mkdir locked && touch locked/x && chmod 000 locked && echo s > secret && chmod 000 secret && "
                "ln -s / root_link")
    started_s = time.monotonic()
    after = take_manifest(jailed, SMALL)
    print(f"listing with odd entries: {time.monotonic() - started_s:.2f} s")
    entries = after.entries
    assert "pipe" not in entries and "sock" not in entries  # never opened: a FIFO would block
    assert entries["sparse.bin"] == ("big", str(1 << 40)) and after.sizes["sparse.bin"] == 1 << 40
    assert entries["just_over"][0] == "big" and entries["at_limit"][0] == "f"
    assert entries["bad\\xffname"] == ("e", "name is not UTF-8")
    assert entries["badlink"] == ("e", "link target is not UTF-8")
    assert entries["locked"] == ("e", "PermissionError") and entries["secret"] == ("e", "PermissionError")
    assert entries["root_link"] == ("l", "/")
    # Every key is plain UTF-8: nothing the host writes later can carry a surrogate.
    json.dumps(entries, ensure_ascii=False).encode("utf-8")
    change = diff_manifests(pristine, after)
    assert change.oversized == ("just_over", "sparse.bin")
    assert "sparse.bin" not in change.written and "at_limit" in change.written
    assert set(change.unreadable) == {"bad\\xffname", "badlink", "locked", "secret"}


@needs_bwrap
def test_an_unreadable_workspace_root_is_an_entry_not_an_infra_error(jailed):
    _ok(jailed, "chmod 000 /workspace")
    assert take_manifest(jailed, SMALL).entries == {".": ("e", "PermissionError")}


def test_a_file_replaced_by_a_folder_and_back_shows_as_a_change(box):
    pristine = take_manifest(box, SMALL)
    _ok(box, "rm textkit/case.py && mkdir textkit/case.py && echo x > textkit/case.py/inner && "
             "rm -rf tests && echo now-a-file > tests")
    change = diff_manifests(pristine, take_manifest(box, SMALL))
    assert change.written["textkit/case.py/inner"] is True and change.written["tests"] is True
    assert "textkit/case.py" in change.deleted and any(path.startswith("tests/") for path in change.deleted)


@pytest.mark.slow
def test_twenty_thousand_files_list_within_the_bounds(box):
    _ok(box, "mkdir flood && cd flood && for d in $(seq 20); do mkdir $d && (cd $d && seq 1000 | xargs touch); done")
    started_s = time.monotonic()
    manifest = take_manifest(box, SMALL)
    print(f"listing 20000 files: {time.monotonic() - started_s:.2f} s")
    assert sum(path.startswith("flood/") for path in manifest.entries) == 20000
    assert manifest.sizes["flood/20/1000"] == 0


class Printing:
    """A sandbox whose every command prints `output` (what a broken listing would print)."""

    def __init__(self, output):
        self.output = output

    def exec(self, command, timeout_s=None):
        return ExecResult(0, self.output, False, 0.0, False, timeout_s or 1.0)


@pytest.mark.parametrize("output, why", [
    ("[" * 100_000 + "]" * 100_000, "nested deeper than 3"), ("", "not JSON"), ("{", "not JSON"),
    ('{"entries": {"a.py": [1, 2]}}', "entry 'a.py' is malformed"), ('{"entries": {"a.py": "f"}}', "malformed"),
    ('{"entries": []}', "has no entries"), ('{"stop": ["moon", 3]}', "has no entries"),
    ('{"entries": {"a.py": ["f", "00", ' + "9" * 5000 + "]}}", "an integer of 5000 digits"),
])
def test_a_listing_of_another_shape_is_a_clear_infra_error_never_a_raw_exception(output, why):
    with pytest.raises(InfraError, match=why):
        take_manifest(Printing(output), SMALL)


def test_the_listings_own_shapes_parse():
    listed = take_manifest(Printing('noise\n{"entries": {"a.py": ["f", "0f", 3], "l": ["l", "a.py"]}}'), SMALL)
    assert listed.entries == {"a.py": ("f", "0f"), "l": ("l", "a.py")} and listed.sizes == {"a.py": 3}
    with pytest.raises(ListingError, match="listing_max_depth"):
        take_manifest(Printing('{"stop": ["depth", 4]}'), SMALL)
