"""The GPU check's dry run, with the GPU machine's packages: imports our code makes must resolve there.

    python -m bench.gpu_audit --allow ALLOWED.json --record BLOCKED.json MODULE [ARGS...]

runs MODULE as `python -m MODULE ARGS...` with a finder in front of sys.meta_path. An import of a
top-level module made from this repository's code or from a carried wheel's (megatron-core's) fails
with ModuleNotFoundError, as it would on the GPU machine, when none of the module's distributions is
in ALLOWED (a JSON list: the machine's image and the carried wheels); each such import is written to
BLOCKED (module, distributions, importer). Imports made by other third-party packages are left alone:
the image brings its own versions of them, with their own dependencies. Standard library only.
"""
from __future__ import annotations

import atexit
import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_IMPORT_MACHINERY = (os.path.dirname(importlib.__file__) + os.sep, "<frozen ")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class ImageFinder:
    """Refuses the imports the GPU machine could not resolve (see the module's docstring)."""

    def __init__(self, allowed: set[str], audited_dirs: list[str]):
        self.allowed = {_normalized(name) for name in allowed}
        self.audited_dirs = audited_dirs
        self.owners = importlib.metadata.packages_distributions()
        self.blocked: list[dict] = []

    def refuses(self, module: str, importer: str) -> bool:
        dists = self.owners.get(module)
        if not dists or module in sys.stdlib_module_names:
            return False  # our own packages, the standard library, or nothing installed under that name
        if any(_normalized(d) in self.allowed for d in dists):
            return False
        return any(importer.startswith(d) and not self._installed_under_repo(importer, d) for d in self.audited_dirs)

    @staticmethod
    def _installed_under_repo(importer: str, audited: str) -> bool:
        """A third-party file in a venv that lies inside the repository (a fresh clone's `.venv`):
        not our code, even though its path starts with the repository's."""
        return audited == str(ROOT) + os.sep and importer.startswith(sys.prefix + os.sep)

    def find_spec(self, fullname, path=None, target=None):
        if "." in fullname:
            return None  # a submodule: its top-level package was audited when it was imported
        importer = _importer()
        if not self.refuses(fullname, importer):
            return None
        self.blocked.append({"module": fullname, "distributions": sorted(set(self.owners[fullname])),
                             "importer": importer})
        raise ModuleNotFoundError(f"No module named {fullname!r} (gpu_audit: the GPU machine has no "
                                  f"{'/'.join(sorted(set(self.owners[fullname])))}; carry it in bench/gpu_plan.py WHEELS)",
                                  name=fullname)


def _importer() -> str:
    """The file of the code that asked for the import (the first frame outside the import machinery)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_IMPORT_MACHINERY):
            return name
        frame = frame.f_back
    return ""


def audited_dirs(allowed: set[str]) -> list[str]:
    """This repository, and the folders of the carried wheels' packages (their imports must resolve there too)."""
    dirs = [str(ROOT) + os.sep]
    wheels = {_normalized(name) for name in allowed}
    for module, dists in importlib.metadata.packages_distributions().items():
        if any(_normalized(d) in wheels for d in dists):
            spec = importlib.util.find_spec(module)
            if spec is not None and spec.submodule_search_locations:
                dirs += [str(Path(p)) + os.sep for p in spec.submodule_search_locations]
    return dirs


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_audit")
    parser.add_argument("--allow", type=Path, required=True, help='JSON {"allowed": [dists], "wheels": [dists]}')
    parser.add_argument("--record", type=Path, required=True, help="where the refused imports are written")
    parser.add_argument("module")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    plan = json.loads(args.allow.read_text())
    finder = ImageFinder(set(plan["allowed"]), audited_dirs(set(plan["wheels"])))
    sys.meta_path.insert(0, finder)
    atexit.register(lambda: args.record.write_text(json.dumps(finder.blocked, indent=1)))
    sys.argv = [args.module, *args.args]
    runpy.run_module(args.module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
