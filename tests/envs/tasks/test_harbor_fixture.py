"""The Harbor fixture helper (tests/envs/harbor_tasks.py): Harbor 0.25.0's own `harbor init --task`
makes the task shapes we test against, and the offline adaptation changes only what cannot work
here (registry images, uv from the internet, the network), then builds and verifies offline."""
import json
import subprocess
import tomllib
import uuid

from tests.envs.harbor_tasks import WHEELS_DIR, author_offline, harbor_init, require_harbor, verifier_wheels

BASE = "swerve-base:test"


def _files(task_dir):
    return {str(p.relative_to(task_dir)): p.read_bytes() for p in task_dir.rglob("*") if p.is_file()}


def _changed(before, after):
    return {name for name in after if before.get(name) != after[name]}


def test_harbor_makes_the_shapes_and_the_offline_edit_changes_only_what_it_must(tmp_path):
    require_harbor()
    wheels = {f"{WHEELS_DIR}/{wheel.name}" for wheel in verifier_wheels()}
    separate = harbor_init(tmp_path, "swerve/separate")
    shared = harbor_init(tmp_path, "swerve/shared", verifier_mode="shared", no_pytest=True)
    steps = harbor_init(tmp_path, "swerve/steps", steps=2)
    shared_pytest = harbor_init(tmp_path, "swerve/shared-pytest", verifier_mode="shared")

    # What Harbor made, as Harbor made it (its registry images, uv, the public network).
    before = {task: _files(task) for task in (separate, shared, steps, shared_pytest)}
    assert before[separate]["tests/Dockerfile"].startswith(b"FROM python:3.12-slim")
    assert "tests/__pycache__/test_outputs.cpython-311.pyc" in before[separate]
    assert "tests/Dockerfile" not in before[shared] and b"pytest" not in before[shared]["tests/test.sh"]
    assert {"steps/step-1/tests/Dockerfile", "steps/step-2/tests/Dockerfile"} <= set(before[steps])
    assert "tests/test.sh" not in before[steps]
    assert b"astral.sh/uv" in before[shared_pytest]["tests/test.sh"]
    config = tomllib.loads(before[steps]["task.toml"].decode())
    assert [s["name"] for s in config["steps"]] == ["step-1", "step-2"]
    assert config["environment"]["network_mode"] == "public" and config["verifier"]["environment_mode"] == "separate"

    for task in before:
        author_offline(task, BASE)
    after = {task: _files(task) for task in before}
    assert _changed(before[separate], after[separate]) == {
        "task.toml", "environment/Dockerfile", "tests/Dockerfile", *(f"tests/{w}" for w in wheels)}
    assert _changed(before[shared], after[shared]) == {"task.toml", "environment/Dockerfile"}
    assert _changed(before[steps], after[steps]) == {"task.toml", "environment/Dockerfile"} | {
        f"steps/step-{k}/tests/{name}" for k in (1, 2) for name in ("Dockerfile", *wheels)}
    assert _changed(before[shared_pytest], after[shared_pytest]) == {
        "task.toml", "environment/Dockerfile", "tests/test.sh", *(f"environment/{w}" for w in wheels)}
    assert after[shared_pytest]["tests/test.sh"] == before[separate]["tests/test.sh"]

    for task in before:
        for name, data in after[task].items():
            if name.endswith("Dockerfile"):
                text = data.decode()
                assert [line for line in text.splitlines() if line.startswith("FROM")] == [f"FROM {BASE}"]
                assert "uv" not in text and "WORKDIR /app" in text
                assert (WHEELS_DIR in text) == (name in ("tests/Dockerfile", "steps/step-1/tests/Dockerfile",
                                                    "steps/step-2/tests/Dockerfile") or task == shared_pytest
                                                and name == "environment/Dockerfile")
        old, new = (tomllib.loads(files["task.toml"].decode()) for files in (before[task], after[task]))
        assert new["environment"].pop("network_mode") == "no-network"
        old["environment"].pop("network_mode")
        assert new == old


def test_the_adapted_verifier_image_builds_offline_and_rewards_the_template_task(tmp_path, docker_image):
    require_harbor()
    task = author_offline(harbor_init(tmp_path, "swerve/hello"), docker_image)
    tag = f"swerve-harbor-fixture:{uuid.uuid4().hex[:12]}"
    try:
        built = subprocess.run(["docker", "build", "-q", "--network", "none", "--label", "swerve.test=harbor-fixture",
                                "-t", tag, str(task / "tests")], capture_output=True, text=True, timeout=300)
        assert built.returncode == 0, built.stderr[-3000:]
        # test.sh writes to /logs/verifier, which Harbor mounts; its pytest output goes to stderr.
        run = subprocess.run(["docker", "run", "--rm", "--network", "none", "--label", "swerve.test=harbor-fixture",
                              tag, "bash", "-c", "mkdir -p /logs/verifier && bash /tests/test.sh >&2; "
                              "cat /logs/verifier/reward.txt; echo ---; cat /logs/verifier/ctrf.json"],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-3000:]
        reward, ctrf = run.stdout.split("---\n", 1)
        assert reward.strip() == "1", run.stderr[-3000:]
        tests = json.loads(ctrf)["results"]["tests"]
        assert [(t["name"].split("::")[-1], t["status"]) for t in tests] == [("test_outputs", "passed")]
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=60)
