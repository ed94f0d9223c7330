"""SGLang's own code, installed beside the venv, for checking what we send it (no GPU needed).

`make sglang-side` pip-installs the pinned SGLang wheel and a few pure helpers with --no-deps
into a side directory (not the venv: SGLang's full dependency set is GPU-only). This module
finds that directory, reads SGLang's source there (`source_path`, `class_fields`,
`string_literals`: by `ast`, nothing imported) and, for code that must run
(`server_args_module`, `api_types_module`), puts it on sys.path behind a triton placeholder.
Importing SGLang changes the process (sys.modules, logging): tests call the importing
functions in a subprocess. Nothing here is imported by the system itself.
"""
from __future__ import annotations

import ast
import importlib
import importlib.machinery
import os
import sys
import types

SGLANG_VERSION = "0.5.23"
ENV_VAR = "SWERVE_SGLANG_DIR"
DEFAULT_DIR = os.path.join("~", ".cache", "swerve", f"sglang-{SGLANG_VERSION}")
STAMP = ".installed"


class SGLangSideMissing(RuntimeError):
    """No usable side install of SGLang."""


def side_dir() -> str:
    """The side install: $SWERVE_SGLANG_DIR, else ~/.cache/swerve/sglang-<version>."""
    path = os.path.expanduser(os.environ.get(ENV_VAR) or DEFAULT_DIR)
    if not os.path.isfile(os.path.join(path, STAMP)) or not os.path.isdir(os.path.join(path, "sglang")):
        raise SGLangSideMissing(f"no SGLang {SGLANG_VERSION} side install at {path} (no {STAMP} or sglang/): "
                                f"run `make sglang-side` (or set {ENV_VAR})")
    return path


def source_path(relative: str) -> str:
    """A file of the installed sglang package, e.g. source_path("srt/managers/io_struct.py")."""
    path = os.path.join(side_dir(), "sglang", relative)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"SGLang {SGLANG_VERSION} has no {relative} (looked at {path})")
    return path


def _tree(relative: str) -> ast.Module:
    with open(source_path(relative), encoding="utf-8") as f:
        return ast.parse(f.read(), filename=relative)


def class_fields(relative: str, class_name: str) -> dict[str, ast.AnnAssign]:
    """Annotated fields of a dataclass / msgspec Struct in that file (same-file bases first), each
    with its ast node: `node.value is None` means required, `node.annotation` is the type."""
    classes = {node.name: node for node in _tree(relative).body if isinstance(node, ast.ClassDef)}
    if class_name not in classes:
        raise KeyError(f"SGLang {SGLANG_VERSION} {relative} defines no class {class_name}")
    fields: dict[str, ast.AnnAssign] = {}
    for base in classes[class_name].bases:
        if isinstance(base, ast.Name) and base.id in classes:
            fields.update(class_fields(relative, base.id))
    for node in classes[class_name].body:
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and "ClassVar" not in ast.unparse(node.annotation)):
            fields[node.target.id] = node
    return fields


def string_literals(relative: str) -> set[str]:
    """Every string constant in that file (the dict keys SGLang writes, among others)."""
    return {n.value for n in ast.walk(_tree(relative)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


class _Placeholder(types.ModuleType):
    """Any attribute is another placeholder (decorators like @triton.jit apply); calling one fails."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__spec__ = importlib.machinery.ModuleSpec(name, None)
        self.__path__ = []

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self.__name__}.{attr}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__} is swerve's CPU placeholder for triton (sglang_side.py)")


def activate() -> str:
    """Put the side install first on sys.path. sglang/srt/utils/common.py imports triton at
    module level (a GPU kernel compiler, ~1 GB, useless without a GPU), and every SGLang module
    we run imports that file; nothing we call runs a kernel, so a placeholder module stands in."""
    path = side_dir()
    if path not in sys.path:
        sys.path.insert(0, path)
    for name in ("triton", "triton.language", "triton.runtime"):
        sys.modules.setdefault(name, _Placeholder(name))
    return path


def server_args_module():
    """sglang.srt.server_args (ServerArgs.add_cli_args / from_cli_args)."""
    activate()
    return importlib.import_module("sglang.srt.server_args")


def api_types_module():
    """sglang.api.v1.api_types: the generated JSON contract the HTTP server checks bodies with."""
    activate()
    return importlib.import_module("sglang.api.v1.api_types")
