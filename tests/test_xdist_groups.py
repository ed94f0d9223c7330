"""The xdist groups of tests/xdist_groups.py reach xdist's scheduler: a real two-worker run of a tiny
suite, where each test records the worker it ran on and each module fixture records its builds."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = 6


def test_docker_tests_and_a_module_sharing_a_fixture_each_run_on_one_worker(tmp_path):
    suite, ran = tmp_path / "suite", tmp_path / "ran"
    suite.mkdir()
    ran.mkdir()
    (suite / "conftest.py").write_text(textwrap.dedent(f"""\
        import os
        import pytest

        pytest_plugins = ["tests.xdist_groups"]
        RAN = {str(ran)!r}

        def note(kind, name):
            with open(os.path.join(RAN, kind), "a") as out:
                out.write(f"{{os.environ['PYTEST_XDIST_WORKER']}} {{name}}\\n")

        @pytest.fixture(scope="session")
        def docker_image():
            return "base"
    """))
    (suite / "test_shared.py").write_text(textwrap.dedent(f"""\
        import pytest
        from conftest import note

        @pytest.fixture(scope="module")
        def story():
            note("builds", "story")

        @pytest.mark.parametrize("case", range({CASES}))
        def test_reads_the_story(story, case):
            note("shared", case)
    """))
    for name in ("test_docker_a.py", "test_docker_b.py"):
        (suite / name).write_text(textwrap.dedent(f"""\
            import pytest
            from conftest import note

            @pytest.mark.parametrize("case", range({CASES // 2}))
            def test_uses_docker(docker_image, case):
                note("docker", case)
        """))
    (suite / "test_free.py").write_text(textwrap.dedent(f"""\
        import time
        import pytest
        from conftest import note

        @pytest.mark.parametrize("case", range({CASES * 2}))
        def test_alone(case):
            time.sleep(0.05)
            note("free", case)
    """))
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{suite}"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                           "--dist", "loadgroup", str(suite)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr

    def workers(kind):
        lines = (ran / kind).read_text().splitlines()
        return [line.split()[0] for line in lines]

    assert len(workers("shared")) == CASES and len(set(workers("shared"))) == 1
    assert workers("builds") == workers("shared")[:1], "the module fixture was built on more than one worker"
    assert len(workers("docker")) == CASES and len(set(workers("docker"))) == 1
    # The ungrouped tests do spread: without the groups, the others would too.
    assert set(workers("free")) == {"gw0", "gw1"}
