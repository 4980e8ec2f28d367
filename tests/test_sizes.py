"""Sizes that stay (STYLE.md): no module of the package over 400 lines, no function or method
over 60, held by this check rather than by a reviewer's memory.

A module's size is its number of lines. A function's runs from its ``def`` line to the last
line of its body: its decorators are not counted (a click command's options are declarations,
read apart from its logic), its docstring and comments are. A nested function counts on its
own and inside the function that holds it.

What was over a limit when the check came in is listed in ``CEILINGS`` at the size it had: it
may shrink, never grow, and once it is within the limit the check fails until its entry is
deleted, so the list only gets shorter.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "awsflock"
MODULE_LIMIT = 400
FUNCTION_LIMIT = 60

#: What was over its limit when this check came in, at the size it had then (qualified name:
#: lines). A module by its dotted name; a function by its module's, its class's and any
#: enclosing function's. Shrink them; delete an entry once it is within the limit.
CEILINGS: dict[str, int] = {}


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _functions(tree: ast.Module, module: str) -> dict[str, int]:
    """Each function and method in ``tree`` by qualified name: its lines, ``def`` to the end
    of its body (the longest, where one name is defined twice in one scope)."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}.{child.name}"
                end = child.end_lineno or child.lineno
                found[name] = max(found.get(name, 0), end - child.lineno + 1)
                visit(child, name)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}.{child.name}")
            else:
                visit(child, prefix)  # inside an if, a try, a with: the same scope

    visit(tree, module)
    return found


def measure(root: Path) -> dict[str, tuple[int, int]]:
    """Every module and function under the package ``root``, by qualified name: (its lines,
    its limit)."""
    sizes: dict[str, tuple[int, int]] = {}
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        module = _module_name(root, path)
        sizes[module] = (len(text.splitlines()), MODULE_LIMIT)
        for name, lines in _functions(ast.parse(text), module).items():
            sizes[name] = (lines, FUNCTION_LIMIT)
    return sizes


def problems(sizes: dict[str, tuple[int, int]], ceilings: dict[str, int]) -> list[str]:
    """What breaks the limits given ``ceilings``, one line each: over a limit and not listed,
    grown past its ceiling, or listed and now within the limit (or gone)."""
    found = []
    for name, (lines, limit) in sorted(sizes.items()):
        ceiling = ceilings.get(name)
        if lines > limit and ceiling is None:
            found.append(f"{name} is {lines} lines, over the limit of {limit}: split it")
        elif ceiling is not None and lines > ceiling:
            found.append(
                f"{name} grew to {lines} lines, past its ceiling of {ceiling} (limit {limit}): "
                "shrink it"
            )
    for name in sorted(ceilings):
        if name not in sizes:
            found.append(f"{name} is gone: delete its entry from CEILINGS in tests/test_sizes.py")
        elif sizes[name][0] <= sizes[name][1]:
            lines, limit = sizes[name]
            found.append(
                f"{name} is {lines} lines, within the limit of {limit} now: delete its entry "
                "from CEILINGS in tests/test_sizes.py"
            )
    return found


def test_no_module_or_function_is_over_its_limit_or_past_its_ceiling():
    assert problems(measure(PACKAGE), CEILINGS) == []


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A package with a module of 401 lines whose function ``big`` is 61 lines (its decorator
    not counted) and whose method ``Small.fits`` is 60."""
    root = tmp_path / "pkg"
    root.mkdir()
    body = "\n".join(f"    x{n} = {n}" for n in range(59))
    method = "\n".join(f"        y{n} = {n}" for n in range(58))
    text = (
        f"@staticmethod\ndef big():\n{body}\n    return 0\n\n\n"
        f"class Small:\n    def fits(self):\n{method}\n        return 0\n"
    )
    lines = text.count("\n")
    (root / "mod.py").write_text(text + "\n" * (401 - lines))
    return root


def test_a_module_or_function_over_the_limit_is_found(planted: Path):
    sizes = measure(planted)
    assert sizes["pkg.mod"] == (401, 400)
    assert sizes["pkg.mod.big"] == (61, 60)
    assert sizes["pkg.mod.Small.fits"] == (60, 60)
    assert problems(sizes, {}) == [
        "pkg.mod is 401 lines, over the limit of 400: split it",
        "pkg.mod.big is 61 lines, over the limit of 60: split it",
    ]


def test_a_listed_one_may_stay_but_not_grow(planted: Path):
    sizes = measure(planted)
    assert problems(sizes, {"pkg.mod": 401, "pkg.mod.big": 61}) == []
    assert problems(sizes, {"pkg.mod": 401, "pkg.mod.big": 60}) == [
        "pkg.mod.big grew to 61 lines, past its ceiling of 60 (limit 60): shrink it"
    ]


def test_a_listed_one_within_the_limit_or_gone_must_be_deleted_from_the_list(planted: Path):
    sizes = measure(planted)
    ceilings = {"pkg.mod": 401, "pkg.mod.big": 61, "pkg.mod.Small.fits": 70, "pkg.old": 500}
    assert problems(sizes, ceilings) == [
        "pkg.mod.Small.fits is 60 lines, within the limit of 60 now: delete its entry from "
        "CEILINGS in tests/test_sizes.py",
        "pkg.old is gone: delete its entry from CEILINGS in tests/test_sizes.py",
    ]
