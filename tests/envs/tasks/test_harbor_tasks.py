"""Tasks made by Harbor 0.25.0's own `harbor init --task` (tests/envs/harbor_tasks.py), filled in as
a task author would, listed, validated and played under sandbox.backend=docker with no override:
both verifier modes, with and without pytest, gold solutions that ship files beside solve.sh, a
fractional reward.json, and agents that try to be paid without doing the work."""
from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from actors.cli.main import main
from configs.schema import SandboxConfig
from envs.sandboxes.docker_sandbox import DockerSandbox
from envs.tasks.loaders import load_task_set
from envs.swe_env import SWEEnv
from tests.envs.harbor_tasks import author_offline, harbor_init, require_harbor

WORDS = "the quick brown fox jumps"
CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a + b\n"
CALC_FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
# Half the reward per function fixed, as reward.json (the only reward file this verifier writes).
CALC_TEST = textwrap.dedent("""\
    #!/bin/bash
    cd /app
    python3 - <<'PY'
    import json
    score = 0.0
    try:
        import calc
        score += 0.5 * (calc.add(2, 3) == 5)
        score += 0.5 * (calc.mul(2, 3) == 6)
    except Exception as error:
        print("calc failed:", error)
    json.dump({"reward": score, "checks": 2}, open("/logs/verifier/reward.json", "w"))
    PY
""")


def _edit_toml(task_dir: Path, old: str, new: str) -> None:
    """Change one line of the task.toml Harbor wrote, as its author would."""
    text = (task_dir / "task.toml").read_text()
    assert old in text, text
    (task_dir / "task.toml").write_text(text.replace(old, new, 1))


def _environment(task_dir: Path, *steps: str) -> None:
    # FROM stays Harbor's; author_offline points it at the offline base image.
    lines = ["FROM ubuntu:24.04", "WORKDIR /app", *steps]
    (task_dir / "environment" / "Dockerfile").write_text("\n".join(lines) + "\n")


def _count_words(root: Path, name: str, **flags) -> Path:
    """Separate verifier: only the declared artifact (/app/count.txt) reaches it."""
    task_dir = harbor_init(root, f"swerve/{name}", **flags)
    (task_dir / "instruction.md").write_text("Write the number of words in /app/words.txt to /app/count.txt.\n")
    _environment(task_dir, f"RUN echo '{WORDS}' > /app/words.txt")
    _edit_toml(task_dir, "artifacts = []", 'artifacts = ["/app/count.txt"]')
    (task_dir / "solution" / "count.sh").write_text("wc -w < /app/words.txt | tr -d ' ' > /app/count.txt\n")
    (task_dir / "solution" / "solve.sh").write_text("#!/bin/bash\nbash /solution/count.sh\n")
    if flags.get("no_pytest"):
        (task_dir / "tests" / "test.sh").write_text(
            "#!/bin/bash\nif [ \"$(cat /app/count.txt)\" = 5 ]; then echo 1 > /logs/verifier/reward.txt; "
            "else echo 0 > /logs/verifier/reward.txt; fi\n")
    else:
        (task_dir / "tests" / "test_outputs.py").write_text(
            "def test_outputs():\n    assert open('/app/count.txt').read().strip() == '5'\n")
    return task_dir


def _fix_calc(root: Path, name: str, **flags) -> Path:
    """Shared verifier in the agent's container; the gold copies a file shipped in solution/."""
    task_dir = harbor_init(root, f"swerve/{name}", **flags)
    (task_dir / "instruction.md").write_text("calc.add and calc.mul in /app/calc.py are wrong: fix them.\n")
    _environment(task_dir, "COPY calc.py /app/calc.py")
    (task_dir / "environment" / "calc.py").write_text(CALC)
    (task_dir / "solution" / "calc.py").write_text(CALC_FIXED)
    (task_dir / "solution" / "solve.sh").write_text("#!/bin/bash\ncp /solution/calc.py /app/calc.py\n")
    if flags.get("no_pytest"):
        (task_dir / "tests" / "test.sh").write_text(CALC_TEST)
    else:
        (task_dir / "tests" / "test_outputs.py").write_text(
            "import sys\nsys.path.insert(0, '/app')\nimport calc\n\n\ndef test_outputs():\n"
            "    assert calc.add(2, 3) == 5 and calc.mul(2, 3) == 6\n")
    return task_dir


@pytest.fixture(scope="module")
def harbor_set(docker_image, tmp_path_factory):
    require_harbor()
    root = tmp_path_factory.mktemp("harbor-set")
    made = [_count_words(root, "count-words"), _count_words(root, "count-words-sh", no_pytest=True),
            _fix_calc(root, "fix-calc", verifier_mode="shared", no_pytest=True),
            _fix_calc(root, "fix-calc-pytest", verifier_mode="shared")]
    for task_dir in made:
        author_offline(task_dir, docker_image)
    broken = _fix_calc(root, "broken-gold", verifier_mode="shared", no_pytest=True)
    (broken / "solution" / "solve.sh").write_text("#!/bin/bash\ncp /solution/calc_v2.py /app/calc.py\n")
    author_offline(broken, docker_image)
    networked = _count_words(root, "needs-network")
    author_offline(networked, docker_image)
    _edit_toml(networked, 'network_mode = "no-network"', 'network_mode = "public"')  # as Harbor wrote it
    harbor_init(root, "swerve/two-steps", steps=2)
    tasks = {task.id: task for task in load_task_set(str(root), split="all").tasks}
    yield root, tasks
    images = {task.image for task in tasks.values()} | {task.harbor.image for task in tasks.values()}
    subprocess.run(["docker", "rmi", "-f", *sorted(images)], capture_output=True)


def test_tasks_made_by_harbor_list_with_their_names_and_leftovers_ignored(harbor_set, capsys):
    root, tasks = harbor_set
    assert set(tasks) == {"swerve/count-words", "swerve/count-words-sh", "swerve/fix-calc", "swerve/fix-calc-pytest",
                          "swerve/broken-gold", "swerve/needs-network"}
    assert any((root / "count-words" / "tests" / "__pycache__").iterdir())  # Harbor's own leftover is there
    assert tasks["swerve/count-words"].harbor.mode == "separate" and tasks["swerve/fix-calc"].harbor.mode == "shared"
    assert main(["tasks", "list", "--source", str(root)]) == 0
    out, err = capsys.readouterr()
    assert "swerve/count-words\tharbor/swerve/count-words\tunknown\ttrain\tharbor verifier=separate" in out, out
    assert "two-steps" in err and "multi-step" in err, err


def test_tasks_made_by_harbor_validate_under_docker_with_no_override(harbor_set, capsys):
    root, _ = harbor_set
    rc = main(["tasks", "validate", "--source", str(root), "sandbox.backend=docker"])
    out = capsys.readouterr().out
    rows = {line.split("\t")[0]: line for line in out.splitlines() if line.startswith("swerve/")}
    for name in ("count-words", "count-words-sh", "fix-calc", "fix-calc-pytest"):
        assert "\tresolved\tunresolved\tok\t" in rows[f"swerve/{name}"], out
    assert "quarantined" in rows["swerve/needs-network"] and "sandbox.docker_network" in rows["swerve/needs-network"]
    # The gold script's own failure, named as such (not "gold patch does not resolve").
    assert "\tquarantined\tgold script fails (exit 1)" in rows["swerve/broken-gold"], out
    assert rc == 1 and "4 ok, 2 quarantined" in out, out


def test_a_run_that_gives_its_sandboxes_a_network_gives_it_to_every_lease():
    open_box, closed_box = DockerSandbox(SandboxConfig(docker_network="bridge")), DockerSandbox(SandboxConfig())
    assert "bridge" == open_box.run_argv("img", "n")[open_box.run_argv("img", "n").index("--network") + 1]
    assert "none" == closed_box.run_argv("img", "n")[closed_box.run_argv("img", "n").index("--network") + 1]


def _episode(task, *commands: str):
    box, env = DockerSandbox(SandboxConfig()), SWEEnv()
    try:
        env.reset(options={"task": task, "sandbox": box})
        for command in commands:
            env.step(f"```bash\n{command}\n```")
        _, reward, terminated, _, info = env.step("```bash\nsubmit\n```")
        assert terminated
        return reward, info
    finally:
        box.close()


def test_the_workspace_is_the_images_workdir_and_a_fractional_reward_is_kept(harbor_set):
    _, tasks = harbor_set
    fix_add_only = "sed -i 's/a - b/a + b/' calc.py && pwd && test -w /app/calc.py"
    reward, info = _episode(tasks["swerve/fix-calc"], fix_add_only)
    assert reward == 0.5 and info["outcome"] == "unresolved", info
    assert "calc.py" in info["model_patch"]


PLANT = ("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && "
         "echo '{\"reward\": 1}' > /logs/verifier/reward.json")
EDIT_TESTS = "mkdir -p /tests && printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh"
LEFTOVER = "(setsid sh -c 'while :; do echo 1 > /logs/verifier/reward.txt 2>/dev/null; sleep 0.05; done' &) ; true"


@pytest.mark.parametrize("name", ["swerve/count-words", "swerve/fix-calc"])
def test_agents_that_plant_rewards_or_edit_the_verifier_get_nothing(harbor_set, name):
    _, tasks = harbor_set
    for attack in (PLANT, EDIT_TESTS, LEFTOVER):
        reward, info = _episode(tasks[name], attack)
        assert reward == 0.0, (attack, info)


def test_a_separate_verifier_sees_the_artifacts_alone(harbor_set):
    _, tasks = harbor_set
    task = tasks["swerve/count-words"]
    # The right count, everywhere but the declared artifact: nothing of it reaches the verifier.
    elsewhere = "echo 5 > /app/count.txt.bak && echo 5 > /tmp/count.txt && echo 5 > /logs/artifacts/count.txt"
    reward, info = _episode(task, elsewhere)
    assert reward == 0.0, info
    # A link to a file with the right answer is not carried either (only files and folders are).
    reward, info = _episode(task, "echo 5 > /tmp/five && ln -s /tmp/five /app/count.txt")
    assert reward == 0.0, info
    reward, info = _episode(task, "wc -w < words.txt | tr -d ' ' > count.txt")
    assert reward == 1.0 and info["outcome"] == "resolved", info
