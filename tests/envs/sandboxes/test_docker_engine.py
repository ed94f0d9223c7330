"""The Docker engine helper: why no engine answers, the base image's tag, the mirror it builds
from. The engine itself is exercised by every test that takes the `docker_image` fixture."""
import subprocess

from envs.sandboxes import docker_engine


def test_no_cli_is_a_reason_naming_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "make docker" in docker_engine.engine_reason()
    assert docker_engine.start_engine()[1] is not None  # and nothing is started


def test_the_base_image_tag_follows_its_recipe(monkeypatch):
    tag = docker_engine.base_image_tag()
    assert tag.startswith("swerve-base:") and tag == docker_engine.base_image_tag()
    monkeypatch.setitem(docker_engine.BASE_RECIPE, "include", [*docker_engine.BASE_RECIPE["include"], "curl"])
    assert docker_engine.base_image_tag() != tag


def test_the_mirror_is_the_one_apt_uses(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    assert docker_engine.apt_mirror(tmp_path) == docker_engine.DEFAULT_MIRROR
    (tmp_path / "sources.list").write_text("deb http://old.example/debian bookworm main\n")
    assert docker_engine.apt_mirror(tmp_path) == "http://old.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\n\nTypes: deb\nURIs: http://mirror.example/debian\n")
    assert docker_engine.apt_mirror(tmp_path) == "http://mirror.example/debian"


def test_stopping_an_engine_waits_for_it_and_ends_only_that_pid():
    # A stand-in daemon: a child process of this test, ended by its pid.
    child = subprocess.Popen(["sleep", "300"])
    docker_engine.stop_engine(child.pid)
    assert child.poll() is not None or child.wait(timeout=5) is not None
    docker_engine.stop_engine(child.pid)  # already gone: nothing to do
