"""The red team's catalogue, every attempt played for real on each task shape it applies to:
forgeries score 0, launderings end as the agent's own outcome and leave the sandbox usable."""
import pytest

from bench.red_team import CATALOGUE, play
from bench.red_team_targets import targets
from envs.swe_env import SWEEnv

CASES = [(attempt, fmt) for attempt in CATALOGUE for fmt in attempt.formats]


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return targets(tmp_path_factory.mktemp("red-team"))


@pytest.fixture
def env(tmp_path):
    environment = SWEEnv(sandbox={"workdir_root": str(tmp_path)})
    yield environment
    environment.close()


def test_the_catalogue_covers_both_classes_on_every_shape():
    names = [a.name for a in CATALOGUE]
    assert len(names) == len(set(names)) and len(CATALOGUE) >= 20
    for klass in ("forge", "launder"):
        for fmt in ("builtin", "micro", "swebench"):
            assert sum(1 for a in CATALOGUE if a.klass == klass and fmt in a.formats) >= 4, (klass, fmt)


@pytest.mark.slow
@pytest.mark.parametrize("attempt,fmt", CASES, ids=[f"{a.name}-{f}" for a, f in CASES])
def test_attempt_ends_as_the_agents_own_outcome(attempt, fmt, env, shapes):
    played = play(attempt, env, shapes[fmt])
    assert played["raised"] == "", played["raised"]
    assert played["reward"] == 0.0 and played["outcome"] == "unresolved", played
    assert played["honest_after"], "the honest episode after the attempt did not resolve"
    assert not played["laundered"]
    if attempt.klass == "forge" and fmt != "swebench":
        # Under the built-in and micro policies the forger's added code is also named.
        assert played["tampered"], played


@pytest.mark.slow
def test_gold_fix_resolves_on_every_shape(env, shapes):
    from bench.red_team import _episode

    for target in shapes.values():
        assert _episode(env, target, (target.fix_command,))["reward"] == 1.0, target.format
