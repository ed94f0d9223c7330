"""What the bug mutators share (envs/tasks/synth/mutators.py): a file's sites and their exact
source positions, and the one way a site becomes a `Mutation` (a minimal textual edit that parses).

`SourceText` maps the AST's (line, UTF-8 byte column) positions to character offsets, so an edit
replaces one small span of the original text and leaves the rest (formatting, comments) as it
was. `Context` walks the tree once and keeps every node with its enclosing function and statement
block; each family (expression_mutators.py, statement_mutators.py) looks only at those sites.
"""
from __future__ import annotations

import ast
import bisect
import random
import re
from dataclasses import dataclass

@dataclass(frozen=True)
class Mutation:
    """One candidate bug: ``new_text`` is the whole mutated file."""

    file: str
    description: str
    family: str
    new_text: str
    lineno: int = 0
    start: int = 0  # character offsets of the replaced span in the original text
    end: int = 0
    replacement: str = ""
    function: str = ""  # qualified name of the enclosing function ("" at module level)


_LINE_RE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


class SourceText:
    """Maps ast (lineno, utf-8 byte column) positions to character offsets in the text."""

    def __init__(self, text: str):
        self.text = text
        self.lines = _LINE_RE.findall(text)
        self.line_starts = [0]
        for line in self.lines:
            self.line_starts.append(self.line_starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        if lineno - 1 >= len(self.lines):
            return len(self.text)
        line = self.lines[lineno - 1]
        if not line.isascii():
            col = len(line.encode("utf-8")[:col].decode("utf-8", errors="replace"))
        return self.line_starts[lineno - 1] + col

    def start(self, node: ast.AST) -> int:
        return self.offset(node.lineno, node.col_offset)

    def end(self, node: ast.AST) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        return self.text[self.start(node) : self.end(node)]

    def line_start(self, lineno: int) -> int:
        return self.line_starts[min(lineno - 1, len(self.lines))]

    def line_end(self, lineno: int) -> int:
        """Offset just past the line's terminator."""
        return self.line_starts[min(lineno, len(self.lines))]

    def line_text(self, lineno: int) -> str:
        return self.lines[lineno - 1] if 0 < lineno <= len(self.lines) else ""

    def eol(self, lineno: int) -> str:
        line = self.line_text(lineno)
        return line[len(line.rstrip("\r\n")) :] or "\n"


@dataclass
class Site:
    node: ast.AST
    function: str  # enclosing function qualname, "" if none
    parent_block: list | None  # the statement list holding ``node`` (statements only)


class Context:
    def __init__(self, text: str, tree: ast.AST, file: str, rng: random.Random):
        self._functions: set[tuple[str, ...]] = set()
        self.src = SourceText(text)
        self.text = text
        self.tree = tree
        self.file = file
        self.rng = rng
        self.sites: list[Site] = []
        self._collect(tree, [], None)

    def _collect(self, node: ast.AST, scope: list[str], block: list | None) -> None:
        func = ".".join(scope)
        self.sites.append(Site(node, func if in_function(scope, self) else "", block))
        child_scope = scope
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            child_scope = scope + [node.name]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._functions.add(tuple(child_scope))
        for name, value in ast.iter_fields(node):
            if isinstance(value, list):
                is_block = bool(value) and all(isinstance(v, ast.stmt) for v in value)
                for item in value:
                    if isinstance(item, ast.AST):
                        self._collect(item, child_scope, value if is_block else None)
            elif isinstance(value, ast.AST):
                self._collect(value, child_scope, None)

    def mutation(self, family: str, site: Site, start: int, end: int, replacement: str,
                 description: str) -> Mutation | None:
        old = self.text[start:end]
        if old == replacement:
            return None
        new_text = self.text[:start] + replacement + self.text[end:]
        try:
            ast.parse(new_text)
        except (SyntaxError, ValueError):
            return None
        lineno = lineno_of(self.src, start)
        where = f" in `{site.function}`" if site.function else ""
        return Mutation(
            file=self.file,
            description=f"line {lineno}{where}: {description}",
            family=family,
            new_text=new_text,
            lineno=lineno,
            start=start,
            end=end,
            replacement=replacement,
            function=site.function,
        )


def in_function(scope: list[str], ctx: Context) -> bool:
    # the scope is "in a function" when any prefix of it names a function
    return any(tuple(scope[: i + 1]) in ctx._functions for i in range(len(scope)))


def lineno_of(src: SourceText, offset: int) -> int:
    return max(1, min(bisect.bisect_right(src.line_starts, offset), len(src.lines) or 1))


def find_token(gap: str, pattern: str) -> tuple[int, int] | None:
    """The single match of ``pattern`` in ``gap`` (text between two operands), or None."""
    if "#" in gap or "\\" in gap:
        return None
    matches = list(re.finditer(pattern, gap))
    if len(matches) != 1:
        return None
    return matches[0].span()


_ATOMIC = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant, ast.List,
           ast.Tuple, ast.Dict, ast.Set, ast.ListComp, ast.SetComp, ast.DictComp)


def is_atomic(node: ast.AST, text: str) -> bool:
    if isinstance(node, ast.Tuple) and not text.startswith("("):
        return False
    return isinstance(node, _ATOMIC)


def short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def skipped_region_ids(tree: ast.AST) -> set[int]:
    """Nodes under ``if __name__ == "__main__":`` / ``if TYPE_CHECKING:`` blocks."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if ("__name__" in test and "__main__" in test) or test.endswith("TYPE_CHECKING"):
                ids.update(id(sub) for sub in ast.walk(node))
    return ids


def annotation_nodes(tree: ast.AST) -> set[int]:
    """ids of nodes inside type annotations (their constants are not worth mutating)."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        anns = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            anns.append(node.returns)
        elif isinstance(node, ast.arg):
            anns.append(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            anns.append(node.annotation)
        for ann in anns:
            if ann is not None:
                ids.update(id(sub) for sub in ast.walk(ann))
    return ids

