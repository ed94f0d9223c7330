import io
import tarfile

import pytest

from envs.grading.harbor_reward import MAX_REWARD_BYTES, read_reward
from envs.grading.harbor_verifier import clean_tar


def files(json_text=None, txt=None):
    return {"reward.json": None if json_text is None else json_text.encode(),
            "reward.txt": None if txt is None else txt.encode()}


@pytest.mark.parametrize("given, value", [
    (files(txt="1\n"), 1.0), (files(txt="0.25"), 0.25), (files(txt=" 0 "), 0.0),
    (files(json_text='{"reward": 0.75, "style": 1}'), 0.75),  # the documented key among several
    (files(json_text='{"accuracy": 0.5}'), 0.5),  # one key: that key's value
    (files(json_text="1"), 1.0),
    (files(json_text='{"reward": 0.5}', txt="1"), 0.5),  # reward.json first, as Harbor reads them
])
def test_rewards_are_read_as_harbor_reads_them(given, value):
    reward = read_reward(given, "reward")
    assert reward.value == value and reward.problem == ""


def test_a_named_key_is_trained_on_and_kept_beside_the_others():
    reward = read_reward(files(json_text='{"reward": 0.1, "tests_passed": 0.9}'), "tests_passed")
    assert reward.value == 0.9 and dict(reward.named) == {"reward": 0.1, "tests_passed": 0.9}


@pytest.mark.parametrize("given, why", [
    (files(), "no reward file"), (files(txt=""), "empty"), (files(txt="yes"), "malformed"),
    (files(txt="nan"), "not finite"), (files(json_text="{"), "malformed"),
    (files(json_text='{"reward": "1"}'), "not a number"), (files(json_text='{"reward": true}'), "not a number"),
    (files(json_text='{"a": 1, "b": 1}'), "harbor_reward_key"), (files(txt="1" * (MAX_REWARD_BYTES + 1)), "larger"),
])
def test_a_missing_or_malformed_reward_is_the_attempts_zero_with_the_reason(given, why):
    reward = read_reward(given, "reward")
    assert reward.value == 0.0 and why in reward.problem


# What the tested process can write into /logs/verifier: each is the attempt's 0 with the reason,
# never a RecursionError, an int-digits ValueError or an OverflowError out of the grader.
@pytest.mark.parametrize("given, why", [
    (files(json_text="[" * 30_000 + "]" * 30_000), "nested deeper than 4"),
    (files(json_text='{"reward": ' + "[" * 20_000 + "1" + "]" * 20_000 + "}"), "nested deeper"),
    (files(json_text='{"reward": {"a": 1}}'), "not a number"),
    (files(json_text='{"reward": [1]}'), "not a number"),
    (files(json_text='{"reward": NaN}'), "not finite"), (files(json_text="Infinity"), "not finite"),
    (files(json_text='{"reward": 1e999}'), "not finite"),
    (files(json_text='{"reward": 1' + "0" * 400 + "}"), "not finite"),
    (files(json_text='{"reward": ' + "9" * 5000 + "}"), "5000 digits"),
    (files(txt="1e999"), "not finite"), (files(txt="9" * 5000), "not finite"),
    ({"reward.json": b'{"reward": \xff}', "reward.txt": None}, "not UTF-8"),
    ({"reward.json": None, "reward.txt": b"\xff\xfe1"}, "malformed"),
])
def test_a_hostile_reward_file_is_the_attempts_zero_with_the_reason(given, why):
    reward = read_reward(given, "reward")
    assert reward.value == 0.0 and why in reward.problem, reward.problem


def _tar(entries) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _info(name, kind=tarfile.REGTYPE, size=0, mode=0o644, link=""):
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mode, info.linkname, info.uid = kind, size, mode, link, 1000
    return info


def test_artifacts_reach_the_verifier_without_links_devices_or_set_id_bits():
    raw = _tar([(_info("logs/artifacts", tarfile.DIRTYPE, mode=0o755), None),
                (_info("logs/artifacts/out.txt", size=2, mode=0o4755), b"hi"),
                (_info("logs/artifacts/passwd", tarfile.SYMTYPE, link="/etc/passwd"), None),
                (_info("logs/artifacts/hard", tarfile.LNKTYPE, link="etc/shadow"), None),
                (_info("logs/artifacts/fifo", tarfile.FIFOTYPE), None),
                (_info("../escape", size=1), b"x")])
    with tarfile.open(fileobj=io.BytesIO(clean_tar(raw, ("/logs/artifacts",)))) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"logs/artifacts", "logs/artifacts/out.txt"}
        out = members["logs/artifacts/out.txt"]
        assert out.mode == 0o755 and out.uid == 0 and tar.extractfile(out).read() == b"hi"
    assert clean_tar(b"", ("/logs/artifacts",)) == b""
