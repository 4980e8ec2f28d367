"""MkDocs hook: the reference pages' generated parts come from the click definitions at build
time (awsflock.cli.manual), so they cannot drift from the command line."""

from __future__ import annotations

from typing import Any

MARKERS = {
    "<!-- generated: commands -->": "markdown",
    "<!-- generated: environment -->": "environment_markdown",
}


def on_page_markdown(markdown: str, **_: Any) -> str:
    from awsflock.cli import manual

    for marker, function in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, getattr(manual, function)())
    return markdown
