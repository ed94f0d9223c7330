"""The layers of the tree (README "Layout"): arrows run down only, bench -> actors -> (envs |
policies) -> configs; envs and policies never import each other; only actors/ and bench/ know
Ray; nothing imports tests; and no import cycle anywhere.

Read from the source (ast), so a cycle hidden by a function-level import counts as one: every
import statement is an edge, wherever it is. Importing a.b.c also runs a/__init__ and
a/b/__init__, so it is an edge to those packages too (unless the importer lives inside them,
where they are already being imported). The task repositories under envs/builtin/repos are
data, not part of the package.
"""
import ast
from pathlib import Path

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
ALLOWED = {("actors.cli", "bench.registry")}
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
    edges = {"envs.a": {"envs.loaders"}, "envs.loaders": {"envs.loaders.x"}, "envs.loaders.x": {"envs.a"}, "envs.b": set()}
    assert _cycles(edges) == [["envs.a", "envs.loaders", "envs.loaders.x"]]


def test_each_layer_imports_only_what_lies_below_it():
    bad = [f"{name}: {target}" for name in MODULES for target, _, _ in _imports(name)
           if target.split(".")[0] in FORBIDDEN[name.split(".")[0]] and (name, target) not in ALLOWED]
    assert bad == []


def test_the_layer_check_sees_a_forbidden_import_inside_a_function(tmp_path, monkeypatch):
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    import ray.util\n    from envs.micro import corpus_texts\n")
    monkeypatch.setitem(MODULES, "policies.sample", sample)
    assert [(target, top) for target, _, top in _imports("policies.sample")] == [("ray.util", False), ("envs.micro", False)]


def test_below_actors_no_function_level_import_of_our_own_code():
    bad = [f"{MODULES[name].relative_to(ROOT)}:{node.lineno}: {target}"
           for name in MODULES if name.split(".")[0] in STRICT
           for target, node, at_top in _imports(name) if not at_top and target.split(".")[0] in PACKAGES]
    assert bad == []
