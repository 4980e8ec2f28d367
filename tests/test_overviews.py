"""Every overview of the package names every store kind the registry has, so a kind added
later is not left out of the first thing a reader sees."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import awsflock.stores
from awsflock.stores import kinds

ROOT = Path(__file__).resolve().parent.parent


def _first_paragraph(path: Path) -> str:
    """The first paragraph after a Markdown page's title."""
    text = path.read_text().split("\n\n")
    return next(part for part in text[1:] if part.strip())


def _description() -> str:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib")
    import tomllib

    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["description"])


#: Each overview: where it is, and how to read it.
OVERVIEWS = {
    "the awsflock.stores docstring": lambda: awsflock.stores.__doc__ or "",
    "docs/contributing/architecture.md": lambda: (
        ROOT / "docs/contributing/architecture.md"
    ).read_text(),
    "pyproject.toml's description": _description,
    "README.md's first paragraph": lambda: _first_paragraph(ROOT / "README.md"),
    "docs/index.md's first paragraphs": lambda: "\n".join(
        (ROOT / "docs/index.md").read_text().split("\n\n")[1:3]
    ),
}


def unnamed(text: str, names: list[str]) -> list[str]:
    """The kind names ``text`` does not mention (as a word's start, in any case: "in-memory"
    names ``memory``, "PostgreSQL" ``postgresql``)."""
    return [name for name in names if not re.search(rf"\b{re.escape(name)}", text, re.I)]


def test_the_registry_has_the_four_kinds():
    assert [kind.name for kind in kinds.ALL] == ["dynamodb", "postgresql", "redis", "memory"]


@pytest.mark.parametrize("overview", sorted(OVERVIEWS))
def test_every_overview_names_every_kind(overview):
    names = [kind.name for kind in kinds.ALL]
    assert unnamed(OVERVIEWS[overview](), names) == [], f"{overview} leaves them out"


def test_a_kind_an_overview_leaves_out_is_found():
    text = "flock(1): leases in DynamoDB, PostgreSQL or in-memory"
    assert unnamed(text, ["dynamodb", "postgresql", "redis", "memory"]) == ["redis"]
