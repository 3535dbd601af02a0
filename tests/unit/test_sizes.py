"""No room of the library grows past what a reader can hold: a module past 600 lines, a
function past 80 or a class past 300 (physical lines, docstrings and comments counted, as a
reader meets them) fails here, named, so the split comes with the change that needed it
rather than after it. The conformance suite under `durability/testing` is held to it too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "durability"

MODULE_LINES = 600
FUNCTION_LINES = 80
CLASS_LINES = 300


def _defined(node: ast.AST, prefix: str = "") -> list[tuple[str, ast.AST, int]]:
    """(qualified name, node, lines) of every function and class under `node`, nested ones
    included."""
    found: list[tuple[str, ast.AST, int]] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{child.name}"
            assert child.end_lineno is not None
            found.append((name, child, child.end_lineno - child.lineno + 1))
            found += _defined(child, f"{name}.")
        else:
            found += _defined(child, prefix)
    return found


def _sizes() -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """Lines per module, per function (methods and nested ones too) and per class, named
    `path` or `path:qualified.name`."""
    modules: dict[str, int] = {}
    functions: dict[str, int] = {}
    classes: dict[str, int] = {}
    for path in sorted(LIBRARY.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT).as_posix()
        modules[where] = len(text.splitlines())
        for name, node, size in _defined(ast.parse(text, str(path))):
            into = classes if isinstance(node, ast.ClassDef) else functions
            into[f"{where}:{name}"] = size
    return modules, functions, classes


MODULES, FUNCTIONS, CLASSES = _sizes()


def _over(sizes: dict[str, int], limit: int) -> list[str]:
    return [f"{name}: {size} lines" for name, size in sorted(sizes.items()) if size > limit]


def test_the_library_has_rooms_to_measure() -> None:
    assert len(MODULES) > 80 and len(FUNCTIONS) > 500 and len(CLASSES) > 100
    # The measure is the reader's: a class counts from its `class` line to its last line.
    assert CLASSES["durability/stepwise.py:Run"] > 100


def test_no_module_is_past_600_lines() -> None:
    over = _over(MODULES, MODULE_LINES)
    assert over == [], f"split these modules by concept (> {MODULE_LINES})"


def test_no_function_is_past_80_lines() -> None:
    over = _over(FUNCTIONS, FUNCTION_LINES)
    assert over == [], f"split these functions along a seam of their own (> {FUNCTION_LINES})"


def test_no_class_is_past_300_lines() -> None:
    over = _over(CLASSES, CLASS_LINES)
    assert over == [], f"give part of these classes to a collaborator or a mixin (> {CLASS_LINES})"
