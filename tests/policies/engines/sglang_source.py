"""What SGLang's installed source says, read with `ast` (policies/engines/sglang_side.py finds it): its
HTTP routes and the request class each parses its body into, and the dict keys a function of ours
reads (held against the keys SGLang's response builders write)."""
from __future__ import annotations

import ast
import functools
import inspect
import os
import sys

from policies.engines import sglang_side


@functools.lru_cache(maxsize=1)
def sglang_routes() -> dict[str, dict]:
    """path -> {"methods", "body"} from every @app/@router route under srt/entrypoints; body is
    the request class FastAPI parses the JSON body into (`obj: X` or `Annotated[X, Body()]`)."""
    root = os.path.dirname(sglang_side.source_path("srt/entrypoints/http_server.py"))
    routes: dict[str, dict] = {}
    for name in sorted(os.listdir(root)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(root, name), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for dec in fn.decorator_list:
                if not (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute) and dec.args
                        and dec.func.attr in ("get", "post", "put", "delete", "api_route")
                        and isinstance(dec.args[0], ast.Constant) and str(dec.args[0].value).startswith("/")):
                    continue
                methods = {dec.func.attr.upper()}
                if dec.func.attr == "api_route":
                    given = [k.value for k in dec.keywords if k.arg == "methods"]
                    methods = set(ast.literal_eval(given[0])) if given else {"GET"}
                route = routes.setdefault(dec.args[0].value, {"methods": set(), "body": None})
                route["methods"] |= methods
                route["body"] = route["body"] or body_class(fn)
    return routes


def body_class(fn) -> str | None:
    for arg in fn.args.args:
        ann = arg.annotation
        if isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == "Annotated":
            ann = ann.slice.elts[0]
        if isinstance(ann, ast.Name) and ann.id[0].isupper() and ann.id not in ("Request", "Response"):
            return ann.id
    return None


def keys_read(fn) -> set[str]:
    """The dict keys a function of ours reads: x.get(K, ...) and x[K], K a literal or a module constant."""
    scope = vars(sys.modules[fn.__module__])
    keys = set()
    for node in ast.walk(ast.parse(inspect.getsource(fn))):
        key = None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and node.args):
            key = node.args[0]
        elif isinstance(node, ast.Subscript):
            key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            keys.add(key.value)
        elif isinstance(key, ast.Name) and isinstance(scope.get(key.id), str):
            keys.add(scope[key.id])
    return keys
