"""Calls between roles wait only in the role handles, and never without a deadline (docs/design.md,
"The calls between roles"). Read from the source (ast), like tests/test_layers.py:

- `ray.get` / `ray.wait` appear in actors/ only in the handle modules, and every one there passes
  `timeout=` (0 is a look that waits for nothing);
- no deadline in actors/ is a number written in the code: no numeric `timeout*=` / `deadline*=`
  argument other than 0, no numeric default of such a parameter, no `time.monotonic() + <number>`.
  Deadlines come from DeadlinesConfig (configs/schema/run.py), the one home of every deadline, or
  from the role's own config section (sandbox.command_timeout_s, engine.request_timeout_s).
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ACTORS = ROOT / "actors"
# The handles through which one role waits on another (actors/cluster/roles.py says which is whose).
HANDLES = {"cluster/roles.py", "fleet/engine_set.py", "fleet/remote.py", "cluster/placement.py"}
RAY_WAITS = {"get", "wait"}


def _sources():
    for path in sorted(ACTORS.rglob("*.py")):
        yield path.relative_to(ACTORS).as_posix(), ast.parse(path.read_text())


def _ray_waits(tree: ast.AST):
    """Every use of ray.get / ray.wait (called or passed along), and `from ray import get`."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in RAY_WAITS
                and isinstance(node.value, ast.Name) and node.value.id == "ray"):
            yield node
        elif isinstance(node, ast.ImportFrom) and node.module == "ray":
            if any(alias.name in RAY_WAITS for alias in node.names):
                yield node


def _is_number(node) -> bool:
    return (isinstance(node, ast.Constant) and isinstance(node.value, (int, float))
            and not isinstance(node.value, bool))


def _names_a_deadline(name: str) -> bool:
    return "timeout" in name or "deadline" in name


def _literal_deadlines(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg and _names_a_deadline(keyword.arg) and _is_number(keyword.value) \
                        and keyword.value.value != 0:
                    yield node.lineno, f"{keyword.arg}={keyword.value.value}"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            positional = node.args.posonlyargs + node.args.args
            defaults = [None] * (len(positional) - len(node.args.defaults)) + list(node.args.defaults)
            for arg, default in [*zip(positional, defaults), *zip(node.args.kwonlyargs, node.args.kw_defaults)]:
                if default is not None and _names_a_deadline(arg.arg) and _is_number(default):
                    yield node.lineno, f"{node.name}({arg.arg}={default.value})"
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            call = node.left
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "monotonic" and _is_number(node.right)):
                yield node.lineno, f"time.monotonic() + {node.right.value}"


def test_only_the_role_handles_wait_on_ray():
    outside = [f"actors/{name}:{node.lineno}" for name, tree in _sources() if name not in HANDLES
               for node in _ray_waits(tree)]
    assert outside == [], "wait on another role through its handle (actors/cluster/roles.py, engine_set.py, remote.py)"


def test_every_wait_in_a_handle_has_a_deadline():
    untimed = []
    for name, tree in _sources():
        if name not in HANDLES:
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RAY_WAITS
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "ray"):
                timeout = next((k.value for k in node.keywords if k.arg == "timeout"), None)
                if timeout is None or (isinstance(timeout, ast.Constant) and timeout.value is None):
                    untimed.append(f"actors/{name}:{node.lineno}")
    assert untimed == []


def test_no_deadline_in_actors_is_a_number_in_the_code():
    literal = [f"actors/{name}:{line} {what}" for name, tree in _sources() for line, what in _literal_deadlines(tree)]
    assert literal == [], "take it from DeadlinesConfig (configs/schema/run.py) or the role's own config"


def test_the_checks_see_what_they_forbid():
    # The detectors themselves, on code that breaks each rule.
    bad = ast.parse("import ray\nfrom ray import get\nray.get(ref)\nf(ray.wait)\n"
                    "x.join(timeout=5)\ndef f(timeout_s=60.0): pass\nd = time.monotonic() + 30.0\n")
    assert len(list(_ray_waits(bad))) == 3
    assert sorted(what for _, what in _literal_deadlines(bad)) == ["f(timeout_s=60.0)", "time.monotonic() + 30.0",
                                                                   "timeout=5"]
    assert list(_literal_deadlines(ast.parse("ray.wait(refs, timeout=0)"))) == []
