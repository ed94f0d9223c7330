"""policies/ sits below actors/ and beside envs/ (README layout): it never imports Ray, envs,
actors, bench or tests, not even inside a function. Whoever needs both sides lives in actors/."""
import ast
from pathlib import Path

POLICIES = Path(__file__).resolve().parents[2] / "policies"
FORBIDDEN = ("ray", "envs", "actors", "bench", "tests")


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_policies_import_nothing_above_or_beside_them():
    files = sorted(POLICIES.rglob("*.py"))
    assert len(files) > 20  # the walk found the package
    bad = [f"{path.relative_to(POLICIES.parent)}:{line}: import {module}"
           for path in files for line, module in _imported_modules(path)
           if module.split(".")[0] in FORBIDDEN]
    assert bad == []


def test_the_check_sees_a_forbidden_import(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    import ray.util\n    from envs.micro import corpus_texts\n")
    assert [m for _, m in _imported_modules(sample)] == ["ray.util", "envs.micro"]
