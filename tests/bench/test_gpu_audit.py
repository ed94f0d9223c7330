"""The dry run's import audit: our code's imports of what the GPU machine lacks fail as they would there."""
import os
import sys

import pytest

from bench.gpu_audit import ImageFinder
from bench.gpu_plan import ROOT

SITE = os.path.dirname(os.path.dirname(pytest.__file__)) + os.sep  # this venv's site-packages


def test_only_our_imports_of_packages_the_machine_lacks_are_refused():
    # ray is installed here and not on the GPU machine; torch is on both; policies is this repository.
    finder = ImageFinder({"torch", "swerve"}, [str(ROOT) + os.sep])
    ours = str(ROOT / "policies" / "model.py")
    assert finder.refuses("ray", ours)
    assert not finder.refuses("ray", SITE + "transformers/utils/import_utils.py")  # the image's own business
    assert not finder.refuses("torch", ours) and not finder.refuses("json", ours)
    assert not finder.refuses("policies", ours)
    with pytest.raises(ModuleNotFoundError, match="gpu_audit: the GPU machine has no ray"):
        finder.find_spec("ray")  # asked from this test file, which lies in the repository
    assert finder.blocked == [{"module": "ray", "distributions": ["ray"], "importer": __file__}]
    assert finder.find_spec("ray.util") is None  # a submodule: its package was audited when it was imported


def test_a_venv_inside_the_repository_is_not_our_code(monkeypatch):
    """A fresh clone's set-up puts its venv at .venv in the repository: the third-party files there
    are the image's business, while the repository's own files are still audited."""
    monkeypatch.setattr(sys, "prefix", str(ROOT / ".venv"))
    finder = ImageFinder({"torch"}, [str(ROOT) + os.sep])
    assert not finder.refuses("ray", str(ROOT / ".venv" / "lib" / "python3.11" / "site-packages" / "transformers" / "x.py"))
    assert finder.refuses("ray", str(ROOT / "policies" / "model.py"))
