"""The red team's catalogue, every attempt played for real on each task shape it applies to, in both
harnesses (the env alone, the episode actor): forgeries score 0, launderings end as the agent's own
outcome and leave the sandbox usable."""
import pytest

from bench.adversarial.red_team import ALL_FORMATS, CATALOGUE, HARNESSES, _episode, tally
from bench.adversarial.red_team_harnesses import ScriptedRouter, play_alone
from bench.adversarial.red_team_targets import BUILTIN_TASK_ID, targets
from envs import image_suite
from envs.tasks.micro import corpus_texts
from policies.chat.chat_tokenizer import load_chat_tokenizer
from policies.tokenizer import ensure_tokenizer


def _once():
    """make test plays every attempt once: its local shapes turn by turn, the harness turning after
    each full round of them. Image rows are SWE-bench rows in a container (a play costs ~4 local
    ones): they stand in for the SWE-bench shape once per class and harness."""
    plays, imaged = [], set()
    for i, attempt in enumerate(CATALOGUE):
        local = tuple(f for f in attempt.formats if f != "image")
        fmt, harness = local[i % len(local)], HARNESSES[(i // len(local)) % len(HARNESSES)]
        if fmt == "swebench" and (attempt.klass, harness) not in imaged:
            imaged.add((attempt.klass, harness))
            fmt = "image"
        plays.append((attempt, fmt, harness))
    return plays


# make check plays the rest of the matrix: every attempt on every shape it applies to, in both harnesses.
ONCE = _once()
REST = [(a, f, h) for a in CATALOGUE for f in a.formats for h in HARNESSES if (a, f, h) not in ONCE]
# The shapes whose grading also runs the detectors, which name a forger's added code.
DETECTED = ("builtin", "micro")


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return targets(tmp_path_factory.mktemp("red-team"))


@pytest.fixture(scope="module")
def tokenizer(tiny_cfg):
    return ensure_tokenizer(tiny_cfg.tokenizer, corpus_texts())


def test_the_catalogue_covers_both_classes_on_every_shape():
    names = [a.name for a in CATALOGUE]
    assert len(names) == len(set(names)) and len(CATALOGUE) >= 20
    for klass in ("forge", "launder"):
        for fmt in ALL_FORMATS:
            assert sum(1 for a in CATALOGUE if a.klass == klass and fmt in a.formats) >= 4, (klass, fmt)
    # Image rows are SWE-bench rows in a container: whatever aims at the one aims at the other.
    assert all("image" in a.formats for a in CATALOGUE if "swebench" in a.formats)


def _ids(cases):
    return [f"{a.name}-{f}-{h}" for a, f, h in cases]


def test_every_attempt_and_every_shape_in_both_harnesses_is_played_once_in_make_test():
    assert [a for a, _, _ in ONCE] == CATALOGUE
    assert {(f, h) for _, f, h in ONCE} == {(f, h) for f in ALL_FORMATS for h in HARNESSES}
    assert len(ONCE) + len(REST) == len(HARNESSES) * sum(len(a.formats) for a in CATALOGUE)


@pytest.mark.slow
@pytest.mark.parametrize("attempt,fmt,harness", ONCE, ids=_ids(ONCE))
def test_attempt_ends_as_the_agents_own_outcome(attempt, fmt, harness, shapes, tokenizer, tmp_path, request):
    _assert_own_outcome(attempt, fmt, harness, shapes, tokenizer, tmp_path, request)


@pytest.mark.check
@pytest.mark.parametrize("attempt,fmt,harness", REST, ids=_ids(REST))
def test_attempt_on_its_other_shapes_ends_as_the_agents_own_outcome(attempt, fmt, harness, shapes, tokenizer,
                                                                     tmp_path, request):
    _assert_own_outcome(attempt, fmt, harness, shapes, tokenizer, tmp_path, request)


def _needs_image(fmt, request):
    """The image shape needs a Docker engine (skips where none can run) and its image, built for
    each play (~0.5 s when present): other sessions on the same engine remove the suite's images.
    It is kept after, as `make docker` keeps them (a cache, labelled swerve.cache=task-image)."""
    if fmt == "image":
        request.getfixturevalue("docker_image")
        image_suite.build([BUILTIN_TASK_ID])


def _assert_own_outcome(attempt, fmt, harness, shapes, tokenizer, tmp_path, request):
    _needs_image(fmt, request)
    played = play_alone(attempt, shapes[fmt], harness, str(tmp_path), tokenizer)
    assert played["raised"] == "", played["raised"]
    assert played["reward"] == 0.0 and played["outcome"] == "unresolved", played
    assert played["honest_after"], "the honest episode after the attempt did not resolve"
    assert not played["laundered"]
    if attempt.klass == "forge" and fmt in DETECTED:
        assert played["tampered"], played


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ALL_FORMATS)
def test_gold_fix_resolves_on_every_shape(fmt, shapes, tmp_path, request):
    from envs.swe_env import SWEEnv

    _needs_image(fmt, request)
    target = shapes[fmt]
    env, lease = SWEEnv(sandbox=target.sandbox_config(str(tmp_path))), target.lease(str(tmp_path))
    try:
        assert _episode(env, target, (target.fix_command,), lease)["reward"] == 1.0
    finally:
        env.close()
        if lease is not None:
            lease.close()


@pytest.mark.slow  # the tokenizer, trained on first use in a session
def test_scripted_replies_reach_the_env_as_a_policys_tokens_would(tokenizer):
    engines = ScriptedRouter(load_chat_tokenizer(tokenizer))
    command = "```bash\nprintf 'caf\\xc3\\xa9' > x && echo ok\n```"
    assert engines.tokenizer.decode(engines.reply_ids(command)) == command
    # A lone surrogate has no UTF-8 form: its bytes go as byte tokens and decode to U+FFFD, which is
    # all a policy's tokens can carry.
    decoded = engines.tokenizer.decode(engines.reply_ids("echo \ud800 > planted.py"))
    assert decoded.startswith("echo \ufffd") and decoded.endswith(" > planted.py") and "\ud800" not in decoded


def test_the_tally_counts_any_reward_and_any_laundering_per_harness_and_shape():
    rows = [{"harness": "env", "format": "micro", "reward": 0.0, "laundered": False},
            {"harness": "episode", "format": "image", "reward": 1.0, "laundered": False},
            {"harness": "episode", "format": "image", "reward": 0.0, "laundered": True}]
    counted = tally(rows)
    assert (counted["red_team_tried"], counted["red_team_rewarded"], counted["red_team_laundered"]) == (3, 1, 1)
    assert counted["red_team_by_cell"] == {"env/micro": {"tried": 1, "rewarded": 0, "laundered": 0},
                                           "episode/image": {"tried": 2, "rewarded": 1, "laundered": 1}}
