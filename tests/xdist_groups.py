"""Which tests share a pytest-xdist worker (a hook imported by tests/conftest.py).

`make test` runs on two workers (`--dist loadgroup`): most of a slow test's wall time is spent waiting
(on Ray's start, a child process, a deadline), so the two cores take two tests at once. Each worker has
its own Ray session, caches and temporary folders, and builds its own copy of every fixture wider than
a test. So two kinds of tests are kept on one worker each:
- the Docker tests: the Docker engine is the one thing the workers would share (`docker_image` starts it
  when none answers and stops it at the session's end);
- a module's tests that share a fixture wider than a test (module, class or package scope): the
  reliability bench, the pipeline's story and the e2e run cost minutes each, and were built once per
  worker while these marks never reached xdist (ci22: ~330 worker-seconds spent twice).

tests/test_xdist_groups.py checks, with a real two-worker run, that the marks reach xdist's scheduler:
they silently did not under pytest 9.2 (pyproject.toml pins below it).
"""
from __future__ import annotations

import pytest

DOCKER_GROUP = "docker"
SHARED_SCOPES = ("module", "class", "package")


def shared_fixture_group(item: pytest.Item) -> str | None:
    """The home (module, or package folder) of the widest fixture this test shares with others and
    that is narrower than the session, so every test that shares one copy of it meets it on the same
    worker; None for a test that shares none."""
    homes = {fixturedef.baseid or item.module.__name__
             for defs in item._fixtureinfo.name2fixturedefs.values() for fixturedef in defs[-1:]
             if fixturedef.scope in SHARED_SCOPES}
    return min(homes, key=len) if homes else None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the marks into the test's scheduling unit
def pytest_collection_modifyitems(config, items):
    for item in items:
        # One group per test: xdist joins several names into a new group of their own.
        if "docker_image" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group(DOCKER_GROUP))
        elif (group := shared_fixture_group(item)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))
