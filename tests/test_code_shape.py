"""The code a newcomer reads stays readable: no function in pipeline/, assets/ or resources/
longer than 60 lines or nested more than 3 deep (if, for, while, with, try, match; an `elif`
is its `if`'s level), the command line's parser table excepted."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LONGEST, DEEPEST = 60, 3
EXEMPT = {"pipeline/cli/commands.py:build_parser"}  # a table of the CLI's options
NESTING = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
           ast.Match)
try:
    NESTING += (ast.TryStar,)
except AttributeError:  # Python before 3.11
    pass


def depth(statements: list[ast.stmt], level: int = 0) -> int:
    """The deepest nesting among `statements`, not counting nested functions and classes."""
    return max((_depth(s, level) for s in statements), default=level)


def _depth(node: ast.stmt, level: int) -> int:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return level  # judged on its own
    if not isinstance(node, NESTING):
        return level
    inner = level + 1
    bodies = [node.body] if hasattr(node, "body") else []
    bodies += [h.body for h in getattr(node, "handlers", [])]
    bodies += [c.body for c in getattr(node, "cases", [])]
    bodies.append(getattr(node, "finalbody", []))
    deepest = max([inner, *(depth(b, inner) for b in bodies)])
    orelse = getattr(node, "orelse", [])
    if isinstance(node, ast.If) and len(orelse) == 1 and isinstance(orelse[0], ast.If):
        return max(deepest, _depth(orelse[0], level))  # an elif
    return max(deepest, depth(orelse, inner))


def functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for package in ("pipeline", "assets", "resources"):
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    found.append((f"{path.relative_to(REPO)}:{node.name}", node))
    return found


def test_the_packages_have_functions_to_judge():
    assert len(functions()) > 500


def test_no_function_is_too_long_or_too_deep():
    offenders = []
    for name, node in functions():
        lines, deep = node.end_lineno - node.lineno + 1, depth(node.body)
        if name not in EXEMPT and (lines > LONGEST or deep > DEEPEST):
            offenders.append(f"{name} (line {node.lineno}): {lines} lines, {deep} deep")
    assert not offenders, "split these (docs/index.md, 'The code'):\n" + "\n".join(offenders)


@pytest.mark.parametrize(("source", "deep"), [
    ("if a:\n    pass\nelif b:\n    pass\nelse:\n    pass", 1),
    ("for a in b:\n    if a:\n        with c:\n            try:\n                pass\n"
     "            except E:\n                pass", 4),
    ("while a:\n    def inner():\n        if b:\n            if c:\n                pass", 1),
    ("try:\n    pass\nfinally:\n    if a:\n        pass", 2),
])
def test_depth_counts_as_a_reader_does(source, deep):
    assert depth(ast.parse(source).body) == deep
