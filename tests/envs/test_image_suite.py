"""The built-in suite as SWE-bench-style image tasks, and a Harbor task built from its
Dockerfile: the rows load, and in real containers the gold fix resolves and the empty one
does not."""
import json
import subprocess
import textwrap

import pytest

from actors.cli.main import main
from envs import image_suite
from envs.tasks.loaders import load_tasks

IDS = ["textkit-003", "confparse-001"]


def test_the_shipped_rows_are_the_suites():
    shipped = [json.loads(line) for line in image_suite.ROWS_FILE.read_text().splitlines()]
    assert shipped == image_suite.rows(), "rows out of date: python -m envs.image_suite rows"


def test_rows_load_as_swebench_tasks_in_their_images_with_tests_only_in_the_test_patch():
    tasks = {t.id: t for t in load_tasks(str(image_suite.ROWS_FILE), "all")}
    builtin = {t.id: t for t in load_tasks("builtin", "all")}
    assert set(tasks) == set(builtin)
    for task_id in IDS:
        task, original = tasks[task_id], builtin[task_id]
        assert task.source == "swebench" and task.workspace_dir == "" and task.image.startswith("swerve-task/")
        assert task.gold_patch == original.gold_patch and task.fail_to_pass == original.fail_to_pass
        # The hidden cases travel with the row, methods, attributes and exceptions included.
        assert task.hidden_cases == original.hidden_cases and task.hidden_cases
        for path, content in original.test_files:
            assert f"+++ b/{path}" in task.test_patch and all(f"+{line}" in task.test_patch
                                                              for line in content.splitlines() if line)
    for row, _, code, _, buggy in image_suite.plan([builtin[i] for i in IDS]):
        tests = {path for path, _ in builtin[row["instance_id"]].test_files}
        assert not tests & set(code) and set(buggy) <= set(code)  # the code, never its tests


@pytest.fixture
def built_images(docker_image):
    tags = image_suite.build(IDS)
    yield tags
    repos = {t.rsplit(":", 1)[0] for t in tags}
    listed = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                            text=True).stdout.split()
    subprocess.run(["docker", "rmi", *[t for t in listed if t.rsplit(":", 1)[0] in repos]], capture_output=True)


def test_image_tasks_validate_in_containers(built_images, capsys):
    rc = main(["tasks", "validate", "--config", "configs/builtin_images.yaml", f"tasks.ids=[{','.join(IDS)}]"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "2 tasks from 2 repos: 2 ok, 0 quarantined, 0 skipped" in out
    listing = subprocess.run(["docker", "run", "--rm", built_images[0], "sh", "-c", "ls -a /testbed"],
                             capture_output=True, text=True).stdout.split()
    assert "tests" not in listing and ".git" not in listing and "pytest.ini" not in listing


HARBOR_TEST = """#!/bin/bash
cd /testbed
if python3 -c "import calc; assert calc.add(2, 3) == 5"; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""


def test_a_harbor_task_is_built_from_its_dockerfile_and_graded_by_its_reward(docker_image, tmp_path, capsys):
    task_dir = tmp_path / "harbor" / "fix-add"
    (task_dir / "environment").mkdir(parents=True)
    (task_dir / "tests").mkdir()
    (task_dir / "solution").mkdir()
    (task_dir / "instruction.md").write_text("calc.add subtracts; make it add.\n")
    (task_dir / "task.toml").write_text('[metadata]\ndifficulty = "easy"\n')
    (task_dir / "environment" / "Dockerfile").write_text(textwrap.dedent(f"""\
        FROM {docker_image}
        RUN mkdir -p /testbed && printf 'def add(a, b):\\n    return a - b\\n' > /testbed/calc.py
        WORKDIR /testbed
    """))
    (task_dir / "tests" / "test.sh").write_text(HARBOR_TEST)
    (task_dir / "solution" / "solve.sh").write_text("sed -i 's/a - b/a + b/' calc.py\n")
    task = load_tasks(str(task_dir.parent), "all")[0]
    try:
        # No sandbox.container_workdir: the image's WORKDIR is the workspace.
        rc = main(["tasks", "validate", "--source", str(task_dir.parent), "sandbox.backend=docker"])
        out = capsys.readouterr().out
        assert rc == 0 and "1 ok, 0 quarantined" in out, out
        # A reward the agent plants is never read: the verifier's folders are emptied first.
        from configs.schema import SandboxConfig
        from envs.sandboxes.docker_sandbox import DockerSandbox
        from envs.swe_env import SWEEnv

        box, env = DockerSandbox(SandboxConfig()), SWEEnv()
        try:
            env.reset(options={"task": task, "sandbox": box})
            env.step("```bash\nmkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && echo planted\n```")
            _, reward, _, _, info = env.step("```bash\nsubmit\n```")
            assert reward == 0.0, info
        finally:
            box.close()
    finally:
        subprocess.run(["docker", "rmi", task.image], capture_output=True)
