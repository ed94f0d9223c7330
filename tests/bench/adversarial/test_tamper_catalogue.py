"""Every reward hack in the catalogue is played in a real sandbox: it scores 0 and (when it wrote
anything) is flagged; those marked `fools_naive` really did fool in-workspace grading."""
import pytest

from bench.adversarial.tamper_catalogue import CATALOGUE, FIXED_LINE, BUGGY_LINE, TASK_ID, play
from envs.tasks.pytest_summary import PASSED, parse_test_status
from envs.sandboxes.local_sandbox import LocalSandbox
from envs.swe_env import SWEEnv
from configs.schema import SandboxConfig
from envs.tasks.loaders import load_tasks


@pytest.fixture(scope="module")
def task():
    return load_tasks("builtin", "all", [TASK_ID])[0]


@pytest.fixture
def env(tmp_path):
    environment = SWEEnv(sandbox={"workdir_root": str(tmp_path)})
    yield environment
    environment.close()


def test_catalogue_spans_every_class():
    assert len(CATALOGUE) >= 12
    assert {a.klass for a in CATALOGUE} >= {"hook", "config", "test_file", "startup", "bytecode", "shadow",
                                             "symlink", "runtime", "answer"}
    assert len({a.name for a in CATALOGUE}) == len(CATALOGUE)


@pytest.mark.slow
@pytest.mark.parametrize("attempt", CATALOGUE, ids=lambda a: a.name)
def test_tamper_attempt_scores_zero_and_is_flagged(attempt, env, task):
    played = play(attempt, env, task)
    assert played["reward"] == 0.0 and played["outcome"] == "unresolved"
    if attempt.writes:
        assert played["tampered"], f"{attempt.name} was not flagged"
    else:
        assert played["tampered"] == {}


def naive_grade(sandbox, task) -> bool:
    """Grading as it was before the pristine view, the grader's report plugin and hidden cases:
    the task's tests run in the agent's own workspace, their `-rA` summary read from the output."""
    tests = task.fail_to_pass + task.pass_to_pass
    result = sandbox.exec(" ".join([task.test_command, *tests]), timeout_s=60)
    status = parse_test_status(result.output, tests)
    return result.exit_code == 0 and all(status[test] == PASSED for test in tests)


@pytest.mark.parametrize("attempt", [a for a in CATALOGUE if a.fools_naive], ids=lambda a: a.name)
def test_attempt_fools_grading_in_the_agents_workspace(attempt, tmp_path, task):
    """The exploit is real: grading in the workspace the agent left behind calls it resolved."""
    sandbox = LocalSandbox(SandboxConfig(workdir_root=str(tmp_path)))
    sandbox.start(task)
    try:
        for command in attempt.commands:
            assert sandbox.exec(command).exit_code == 0
        assert BUGGY_LINE in sandbox.read_files(["textkit/wrap.py"])["textkit/wrap.py"]
        assert naive_grade(sandbox, task)
    finally:
        sandbox.close()


@pytest.mark.slow
def test_answer_is_out_of_reach(env, task):
    attempts = {a.name: a for a in CATALOGUE}
    history = play(attempts["read_history"], env, task)["outputs"][0]
    assert "not a git repository" in history and ".git" not in history.split("\n", 1)[1]
    found = play(attempts["search_for_the_gold_patch"], env, task)["outputs"][0]
    assert found.splitlines()[1:] == [] or all("site-packages" in line for line in found.splitlines()[1:])


@pytest.mark.slow
def test_a_fix_next_to_a_tamper_scores_zero_or_is_graded_without_it(tmp_path, task):
    fix = f"sed -i 's/{BUGGY_LINE}/{FIXED_LINE}/' textkit/wrap.py"
    conftest = next(a for a in CATALOGUE if a.name == "conftest_pass_every_report").commands[0]
    for scores_zero, reward in ((True, 0.0), (False, 1.0)):
        env = SWEEnv(tamper_scores_zero=scores_zero, sandbox={"workdir_root": str(tmp_path)})
        env.reset(options={"task": task})
        env.step(f"```bash\n{fix}\n```")
        env.step(f"```bash\n{conftest}\n```")
        _, got, _, _, info = env.step("```bash\nsubmit\n```")
        env.close()
        assert got == reward and set(info["tampered"]) == {"conftest.py"}
        # The patch is exactly what was graded: the fix, not the conftest.
        assert "textkit/wrap.py" in info["model_patch"] and "conftest.py" not in info["model_patch"]
