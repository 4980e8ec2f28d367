"""The documentation as the tests read it: the recipes the docs mark with
``<!-- recipe: NAME -->`` (the code block after the marker), and the README."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def recipe(page: str, name: str) -> str:
    """The code block that follows ``<!-- recipe: NAME -->`` on a docs page."""
    text = (DOCS / page).read_text()
    match = re.search(
        rf"<!-- recipe: {re.escape(name)} -->\s*```[a-z]*\n(.*?)\n```", text, flags=re.S
    )
    assert match, f"no recipe {name!r} in docs/{page}"
    return match.group(1)
