"""The layers of the tree (README "Layout"): arrows run down only, bench -> actors -> (envs |
policies) -> configs; envs and policies never import each other; only actors/ and bench/ know
Ray; nothing imports tests; and no import cycle anywhere.

Read from the source (ast), so a cycle hidden by a function-level import counts as one: every
import statement is an edge, wherever it is. Importing a.b.c also runs a/__init__ and
a/b/__init__, so it is an edge to those packages too (unless the importer lives inside them,
where they are already being imported). The task repositories under envs/tasks/builtin/repos are
data, not part of the package.

Inside a layer, each sub-package names the parts of its own layer it may import (SUB_PACKAGES,
the rules each sub-package's docstring states); the layer's other top-level modules stand above
its sub-packages. And no folder becomes a drawer again: at most MAX_MODULES modules side by side,
no module over MAX_LINES lines.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("configs", "envs", "policies", "actors", "bench")
# What each layer may not import, wherever the import statement is.
FORBIDDEN = {
    "configs": ("envs", "policies", "actors", "bench", "tests", "ray"),
    "envs": ("policies", "actors", "bench", "tests", "ray"),
    "policies": ("envs", "actors", "bench", "tests", "ray"),
    "actors": ("bench", "tests"),
    "bench": ("tests",),
}
# The CLI entry dispatches `swerve bench NAME` to the tools above it (inside the command's function).
ALLOWED = {("actors.cli.main", "bench.registry")}
# What each sub-package may import from the rest of its own layer (its own modules always).
# Arrows run down this table: envs (tasks < sandboxes < grading < the envs), actors (report <
# cluster < engines, episodes < training < fleet < stages < cli), policies (chat < engines <
# server; training beside them).
_ENVS_BELOW_GRADING = ("envs.outcomes", "envs.tasks", "envs.sandboxes")
_ACTORS_BELOW_FLEET = ("actors.report", "actors.cluster", "actors.engines", "actors.episodes", "actors.training")
SUB_PACKAGES = {
    "envs.tasks": ("envs.outcomes",),
    "envs.sandboxes": ("envs.outcomes", "envs.tasks.task"),
    "envs.grading": _ENVS_BELOW_GRADING,
    "envs.harness_agents": (),
    "actors.report": (),
    "actors.cluster": ("actors.report",),
    "actors.engines": ("actors.report", "actors.cluster"),
    "actors.episodes": ("actors.report", "actors.cluster"),
    "actors.training": ("actors.report", "actors.cluster", "actors.episodes"),
    "actors.fleet": _ACTORS_BELOW_FLEET,
    "actors.stages": _ACTORS_BELOW_FLEET + ("actors.fleet",),
    "actors.cli": _ACTORS_BELOW_FLEET + ("actors.fleet", "actors.stages"),
    "policies.chat": ("policies.sample_types",),
    "policies.engines": ("policies.sample_types", "policies.device", "policies.chat"),
    "policies.server": ("policies.sample_types", "policies.model", "policies.tokenizer", "policies.chat",
                        "policies.engines"),
    "policies.training": ("policies.sample_types", "policies.device", "policies.hf_dir", "policies.model",
                          "policies.tokenizer", "policies.chat"),
    "bench.throughput": (),
    "bench.adversarial": (),
    "bench.resilience": ("bench.adversarial", "bench.browser"),
    "configs.schema": (),
}
# A drawer: more modules than a reader takes in side by side, or a module too long to read at once.
MAX_MODULES, MAX_LINES = 15, 400
# Layers whose function-level imports may only be third-party (heavy or optional ones, loaded by
# those who use them). actors/ and bench/ also import our own code lazily, on purpose: the CLI and
# the torch-free episode processes start fast; the cycle test counts those imports as edges too.
STRICT = ("configs", "envs", "policies")


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")):
        relative = path.relative_to(ROOT)
        if "repos" in relative.parts:
            continue
        parts = list(relative.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _imports(name: str) -> list[tuple[str, ast.stmt, bool]]:
    """(imported module, statement, at module level) for every import statement of a module."""
    tree = ast.parse(MODULES[name].read_text())
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the importer's package
                package = name.split(".") if _is_package(name) else name.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module
            for alias in node.names:
                # `from pkg import mod` imports the module pkg.mod when there is one.
                submodule = f"{base}.{alias.name}"
                found.append((submodule if submodule in MODULES else base, node, id(node) in top))
    return found


def _edges() -> dict[str, set[str]]:
    edges = {name: set() for name in MODULES}
    for name in MODULES:
        for target, _, _ in _imports(name):
            if target not in MODULES:
                continue
            parts = target.split(".")
            for depth in range(1, len(parts) + 1):
                dependency = ".".join(parts[:depth])
                inside = name == dependency or name.startswith(dependency + ".")
                if dependency in MODULES and not inside:
                    edges[name].add(dependency)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), or a module importing itself."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1 or node in edges[node]:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_anywhere():
    assert len({name.split(".")[0] for name in MODULES}) == len(PACKAGES)  # the walk found every layer
    assert _cycles(_edges()) == []


def test_the_cycle_finder_finds_a_cycle_through_a_package_init():
    edges = {"envs.a": {"envs.tasks.loaders"}, "envs.tasks.loaders": {"envs.tasks.loaders.x"}, "envs.tasks.loaders.x": {"envs.a"}, "envs.b": set()}
    assert _cycles(edges) == [["envs.a", "envs.tasks.loaders", "envs.tasks.loaders.x"]]


def test_each_layer_imports_only_what_lies_below_it():
    bad = [f"{name}: {target}" for name in MODULES for target, _, _ in _imports(name)
           if target.split(".")[0] in FORBIDDEN[name.split(".")[0]] and (name, target) not in ALLOWED]
    assert bad == []


def test_the_layer_check_sees_a_forbidden_import_inside_a_function(tmp_path, monkeypatch):
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    import ray.util\n    from envs.tasks.micro import corpus_texts\n")
    monkeypatch.setitem(MODULES, "policies.sample", sample)
    assert [(target, top) for target, _, top in _imports("policies.sample")] == [("ray.util", False), ("envs.tasks.micro", False)]


def test_below_actors_no_function_level_import_of_our_own_code():
    bad = [f"{MODULES[name].relative_to(ROOT)}:{node.lineno}: {target}"
           for name in MODULES if name.split(".")[0] in STRICT
           for target, node, at_top in _imports(name) if not at_top and target.split(".")[0] in PACKAGES]
    assert bad == []


def _sub_package(name: str) -> str:
    """The sub-package a module belongs to ("envs.grading"), or "" for a layer's top-level module."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or (len(parts) == 2 and _is_package(name)) else ""


def _within(target: str, allowed: tuple) -> bool:
    return any(target == a or target.startswith(a + ".") for a in allowed)


def test_every_sub_package_has_its_rule_and_says_it():
    found = {_sub_package(name) for name in MODULES} - {""}
    assert found == set(SUB_PACKAGES)
    for package in SUB_PACKAGES:
        doc = ast.get_docstring(ast.parse(MODULES[package].read_text())) or ""
        assert "may import" in doc.lower(), f"{package}/__init__.py: say what it may import"


def test_each_sub_package_imports_only_what_its_rule_allows():
    bad = []
    for name in MODULES:
        package = _sub_package(name)
        if package not in SUB_PACKAGES:
            continue
        layer = name.split(".")[0]
        for target, node, _ in _imports(name):
            if (target.split(".")[0] == layer and target != layer and not _within(target, (package,))
                    and not _within(target, SUB_PACKAGES[package])):
                bad.append(f"{name}:{node.lineno}: {target}")
    assert bad == []


def test_the_sub_package_rule_sees_an_import_that_runs_back_up(tmp_path, monkeypatch):
    sample = tmp_path / "sample.py"
    sample.write_text("from envs.grading.grader import grade\n")
    monkeypatch.setitem(MODULES, "envs.sandboxes.sample", sample)
    with pytest.raises(AssertionError):
        test_each_sub_package_imports_only_what_its_rule_allows()


def test_no_folder_is_a_drawer_and_no_module_is_too_long():
    """The code and its tests alike (tests mirror the tree, so a drawer there mirrors one here)."""
    paths = list(MODULES.values()) + sorted((ROOT / "tests").rglob("*.py"))
    folders: dict[Path, int] = {}
    for path in paths:
        if path.name not in ("__init__.py", "conftest.py"):
            folders[path.parent] = folders.get(path.parent, 0) + 1
    crowded = {str(folder.relative_to(ROOT)): n for folder, n in folders.items() if n > MAX_MODULES}
    long = {str(path.relative_to(ROOT)): n for path in paths if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert (crowded, long) == ({}, {})
