"""The design lives in the repository (docs/) and stays true to the code.

- No file names a design document kept outside the repository (a clone has no `../shared`).
- Every relative link of docs/*.md and README.md reaches a file of the repository (and a heading,
  when it names one in docs/); every repository path docs/ names in backticks exists.
- The lists in docs/ are checked against the code both ways, so adding, renaming or removing a
  command, config section or key, deadline, metric, outcome class or accounting counter without
  the docs (or the docs without the code) fails here.
"""
import argparse
import re
import subprocess
from dataclasses import fields
from pathlib import Path

import pytest

from actors.cli.main import parser
from actors.report.run_dir import METRIC_NAMES
from actors.training.sample_collector import COUNTERS
from configs.loader import all_keys
from configs.schema import Config, DeadlinesConfig
from envs.outcomes import SCORED, InfraSource, Outcome

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [*DOCS, ROOT / "README.md"]
CONTRACTS = ROOT / "docs" / "contracts.md"
# Design notes kept outside the repository: a clone has none of them, so nothing may point there.
OUTSIDE = re.compile(r"\.\./shared\b|(?<!docs/)\b(?:DESIGN|LAYOUT)\.md\b")
THIS_FILE = Path(__file__).resolve()  # it names what it forbids
BINARY_SUFFIXES = (".png", ".jpg", ".gz", ".pt", ".safetensors", ".parquet", ".whl", ".pyc")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"`([^`\n]+)`")
# A config key in backticks, optionally with a value: `rollout.max_staleness`, `engine.priority=age`.
CONFIG_KEY = re.compile(r"([a-z_]+(?:\.[a-z0-9_]+)+)(?:=\S*)?")
FILE_SUFFIXES = ("json", "jsonl", "yaml", "yml", "py", "md", "png", "txt", "toml", "sh", "pt", "safetensors", "log")
REPO_DIRS = ("actors", "envs", "policies", "configs", "bench", "tests", "docs")
PATH_SUFFIXES = (".py", ".md", ".yaml", ".toml", "/")


def repository_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout:
        return [ROOT / name for name in listed.stdout.split("\0") if name and (ROOT / name).is_file()]
    skip = {".git", "runs", "__pycache__"}  # an export without git: every file but outputs
    return [p for p in ROOT.rglob("*") if p.is_file() and not skip.intersection(p.relative_to(ROOT).parts)
            and not p.relative_to(ROOT).parts[0].startswith(".venv")]


def prose(path: Path) -> str:
    """The page without its fenced code blocks."""
    return FENCE.sub("", path.read_text())


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", prose(path), re.MULTILINE)}


def section(path: Path, heading: str) -> str:
    """The text under `heading` up to the next heading of the same or a higher level."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.fullmatch(rf"(#+)\s+{re.escape(heading)}", line))
    level = len(lines[start]) - len(lines[start].lstrip("#"))
    end = next((i for i in range(start + 1, len(lines))
                if re.match(rf"#{{1,{level}}}\s", lines[i])), len(lines))
    return "\n".join(lines[start + 1:end])


def tables(text: str) -> list[list[list[str]]]:
    """Each markdown table's body rows (header and rule left out) as lists of cells."""
    found, rows = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            found.append(rows[2:])
            rows = []
    return found


def named(cell: str) -> list[str]:
    return CODE.findall(cell)


def first_names(text: str) -> list[str]:
    return [name for table in tables(text) for row in table for name in named(row[0])]


def test_no_file_names_a_design_document_outside_the_repository():
    found = []
    for path in repository_files():
        if path == THIS_FILE or path.suffix in BINARY_SUFFIXES:
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        found += [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
                  for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert not found, "point at docs/ instead:\n" + "\n".join(found)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path):
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        where, _, anchor = target.partition("#")
        path = (page.parent / where).resolve() if where else page
        if not path.exists() or ROOT not in [path, *path.parents]:
            broken.append(f"{target}: no such file in the repository")
        elif anchor and path.suffix == ".md" and path.parent == ROOT / "docs" and anchor not in anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.name}")
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_repository_paths_named_in_docs_exist():
    missing = []
    for page in DOCS:
        for token in CODE.findall(prose(page)):
            if re.search(r"[<>*\s]|NAME", token) or token.split("/")[0] not in REPO_DIRS \
                    or "/" not in token or not token.endswith(PATH_SUFFIXES):
                continue
            if not (ROOT / token).exists():
                missing.append(f"{page.name}: {token}")
    assert not missing, "\n".join(missing)


def test_config_keys_named_in_docs_exist():
    keys = set(all_keys())
    sections = {f.name for f in fields(Config)}
    unknown = []
    for page in DOCS:
        for token in CODE.findall(prose(page)):
            match = CONFIG_KEY.fullmatch(token)
            if not match or token.split(".")[0] not in sections or token.rsplit(".", 1)[1] in FILE_SUFFIXES:
                continue
            key = match.group(1)
            if key not in keys and not any(k.startswith(key + ".") for k in keys):
                unknown.append(f"{page.name}: {token}")
    assert not unknown, "config keys the schema does not have:\n" + "\n".join(unknown)


def test_commands_match_the_cli():
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(first_names(section(CONTRACTS, "Entry points"))) == set(sub.choices)


def test_config_sections_match_the_schema():
    rows = [row for table in tables(section(CONTRACTS, "Configuration")) for row in table]
    documented = {named(row[0])[0]: named(row[1])[0] for row in rows}
    assert documented == {f.name: type(getattr(Config(), f.name)).__name__ for f in fields(Config)}


def test_deadlines_match_deadlines_config():
    rows = [row for table in tables(section(CONTRACTS, "Deadlines")) for row in table]
    documented = {named(row[0])[0].removeprefix("deadlines."): float(row[1]) for row in rows}
    assert documented == {f.name: float(f.default) for f in fields(DeadlinesConfig)}


def test_metric_names_match_the_run_directory_contract():
    documented = first_names(section(CONTRACTS, "Metrics"))
    assert len(documented) == len(set(documented)), "a metric is listed twice"
    assert set(documented) == set(METRIC_NAMES)


def test_outcome_classes_match_envs_outcomes():
    outcomes, sources = tables(section(CONTRACTS, "Outcome classes"))
    scored = {named(row[0])[0]: row[1].startswith("yes") for row in outcomes}
    assert scored == {o.value: o in SCORED for o in Outcome}
    assert {named(row[0])[0] for row in sources} == {s.value for s in InfraSource}


def test_accounting_identity_matches_the_collector():
    text = section(CONTRACTS, "Accounting identity")
    left, right = re.search(r"^(\w+) = (.+)$", text, re.MULTILINE).groups()
    assert [left, *right.split(" + ")] == list(COUNTERS)


def _test_ids(heading: str) -> list[str]:
    """The `tests/...py::name` ids named in a section of docs/contracts.md."""
    return [token for token in CODE.findall(section(CONTRACTS, heading)) if re.fullmatch(r"tests/\S+\.py::\w+", token)]


def _in_check_tier(path: Path, name: str) -> bool | None:
    """Whether the test function `name` of `path` is marked `check` (itself or its module); None
    when the file has no such test function."""
    import ast

    def is_check(node) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "check" and ast.unparse(node) == "pytest.mark.check"

    tree = ast.parse(path.read_text())
    module_check = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                       and any(is_check(v) for v in ast.walk(n.value)) for n in tree.body)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return module_check or any(is_check(d) for d in node.decorator_list)
    return None


@pytest.mark.parametrize("heading,in_check", [("What `make test` covers", False), ("What `make check` holds", True)])
def test_the_tiers_name_tests_that_exist_in_that_tier(heading, in_check):
    ids = _test_ids(heading)
    assert len(ids) >= 4, f"no test ids under '{heading}'"
    wrong = []
    for test_id in ids:
        path, name = test_id.split("::")
        tier = _in_check_tier(ROOT / path, name) if (ROOT / path).is_file() else None
        if tier is None:
            wrong.append(f"{test_id}: no such test")
        elif tier != in_check:
            wrong.append(f"{test_id}: {'not ' if in_check else ''}marked check")
    assert not wrong, f"docs/contracts.md, '{heading}':\n" + "\n".join(wrong)
