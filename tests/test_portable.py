"""The tree names no absolute path of a checkout: a clone in any folder passes its own tests.

A path written into the code (`REPO = "/somewhere/swerve"`, `/somewhere/swerve/.venv/bin/python`)
passes where that checkout happens to sit and fails in every other clone; tests and scripts find the
repository from their own location (`Path(__file__).resolve().parents[n]`) and run
`sys.executable`. Checked over every tracked text file (code, tests, configs, the Makefile, CI):
- this checkout's own path;
- any absolute path that lies inside a checkout of this project on this machine (another clone's
  folder, its venv);
- a path under a person's home folder (in /home or /Users), which no other machine has.
"""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# An absolute path inside a literal or a command line: a slash not preceded by a path character.
ABSOLUTE = re.compile(r"(?<![\w.~$-])/+(?:[\w.@+-]+/)*[\w.@+-]+")
HOME_FOLDER = re.compile(r"^/(?:home|Users)/[^/]+/")
BINARY_SUFFIXES = (".png", ".jpg", ".gz", ".pt", ".safetensors", ".parquet", ".whl", ".pyc")


def tracked_files(root: Path) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout:
        return [root / name for name in listed.stdout.split("\0") if name]
    skip = {".git", ".venv", "runs", "__pycache__"}  # an export without git: every file but outputs
    return [p for p in root.rglob("*") if p.is_file() and not skip.intersection(p.relative_to(root).parts)]


def _is_checkout(folder: Path) -> bool:
    pyproject = folder / "pyproject.toml"
    try:
        return pyproject.is_file() and 'name = "swerve"' in pyproject.read_text()
    except OSError:
        return False


def _inside_a_checkout(path: str, seen: dict) -> bool:
    for folder in [Path(path), *Path(path).parents][:-1]:  # never "/" itself
        if folder not in seen:
            seen[folder] = _is_checkout(folder)
        if seen[folder]:
            return True
    return False


def checkout_paths(files: list[Path]) -> list[str]:
    """`file:line: path` for every absolute path of a checkout named in `files`."""
    found, seen = [], {}
    for path in files:
        if path.suffix in BINARY_SUFFIXES:
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            named = [p for p in ABSOLUTE.findall(line) if HOME_FOLDER.match(p) or _inside_a_checkout(p, seen)]
            found += [f"{path}:{number}: {p}" for p in dict.fromkeys(named)]
    return found


def test_the_tree_names_no_checkout_path():
    found = checkout_paths(tracked_files(ROOT))
    assert found == [], "derive these from the file's own location (Path(__file__)) or use sys.executable:\n" + \
        "\n".join(found)


def test_the_check_finds_what_it_is_for(tmp_path):
    """It would catch the defect it exists for: a checkout's path, another clone's venv, a home folder."""
    other = tmp_path / "elsewhere" / "swerve"
    other.mkdir(parents=True)
    (other / "pyproject.toml").write_text('[project]\nname = "swerve"\n')
    planted = tmp_path / "planted.py"
    home = "/" + "home/someone/src/swerve/runs"  # split, so this file does not name one itself
    planted.write_text(f'REPO = "{ROOT}"\n'
                       f'PY = "{other}/.venv/bin/python"\n'
                       f'DATA = "{home}"\n'
                       f'URL = "file://{ROOT}/README.md"\n'
                       'SAFE = ["/workspace", "/usr/bin/env", "/tmp/ray/session_latest", "~/src/lib", "$(HOME)/.cache",'
                       ' "tests/smoke.yaml", "http://127.0.0.1:8265/api"]\n')
    found = [line.split(": ", 1)[1] for line in checkout_paths([planted])]
    assert found == [str(ROOT), f"{other}/.venv/bin/python", home, f"//{ROOT}/README.md"]
