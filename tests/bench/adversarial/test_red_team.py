"""The red team's catalogue, every attempt played for real on each task shape it applies to:
forgeries score 0, launderings end as the agent's own outcome and leave the sandbox usable."""
import pytest

from bench.adversarial.red_team import CATALOGUE, play
from bench.adversarial.red_team_targets import targets
from envs.swe_env import SWEEnv

# make test plays every attempt once, each on one of its task shapes (turn by turn, so every shape is
# played); make check plays the rest of the matrix (every attempt on every shape it applies to).
ONCE = [(attempt, attempt.formats[i % len(attempt.formats)]) for i, attempt in enumerate(CATALOGUE)]
REST = [(attempt, fmt) for attempt in CATALOGUE for fmt in attempt.formats if (attempt, fmt) not in ONCE]


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


def _ids(cases):
    return [f"{a.name}-{f}" for a, f in cases]


def test_every_attempt_and_every_shape_is_played_once_in_make_test():
    assert [a for a, _ in ONCE] == CATALOGUE and {f for _, f in ONCE} == {"builtin", "micro", "swebench"}
    assert len(ONCE) + len(REST) == sum(len(a.formats) for a in CATALOGUE)


@pytest.mark.slow
@pytest.mark.parametrize("attempt,fmt", ONCE, ids=_ids(ONCE))
def test_attempt_ends_as_the_agents_own_outcome(attempt, fmt, env, shapes):
    _assert_own_outcome(attempt, fmt, env, shapes)


@pytest.mark.check
@pytest.mark.parametrize("attempt,fmt", REST, ids=_ids(REST))
def test_attempt_on_its_other_shapes_ends_as_the_agents_own_outcome(attempt, fmt, env, shapes):
    _assert_own_outcome(attempt, fmt, env, shapes)


def _assert_own_outcome(attempt, fmt, env, shapes):
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
    from bench.adversarial.red_team import _episode

    for target in shapes.values():
        assert _episode(env, target, (target.fix_command,))["reward"] == 1.0, target.format
