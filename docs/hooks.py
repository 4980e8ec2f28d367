"""MkDocs hook: the reference pages' generated parts come from the click definitions at build
time (awsflock.cli.manual), so they cannot drift from the command line; the site shows the
version it documents and, once the repository has a public URL, links to it."""

from __future__ import annotations

import importlib.util
import logging
import os
import re
from pathlib import Path
from typing import Any

MARKERS = {
    "<!-- generated: commands -->": "markdown",
    "<!-- generated: environment -->": "environment_markdown",
}

#: Under "mkdocs", so that `mkdocs build --strict` counts its warnings.
log = logging.getLogger("mkdocs.hooks.awsflock")


def repository(pyproject: Path, env: dict[str, str]) -> str:
    """The repository's URL: ``[project.urls] Repository`` in pyproject.toml, the one place to
    set it; else, when GitHub Actions builds the site, the repository it builds; else ""."""
    urls = re.search(r"^\[project\.urls\]\n(.*?)(?=^\[|\Z)", pyproject.read_text(), re.M | re.S)
    found = urls and re.search(r'^Repository\s*=\s*"([^"]+)"', urls.group(1), re.M)
    if found:
        return found.group(1).rstrip("/")
    if env.get("GITHUB_REPOSITORY"):
        server = env.get("GITHUB_SERVER_URL") or "https://github.com"
        return f"{server.rstrip('/')}/{env['GITHUB_REPOSITORY']}"
    return ""


def on_config(config: Any, **_: Any) -> Any:
    from importlib.metadata import version

    shown = version("awsflock")
    config.copyright = f"awsflock {shown} · Apache License 2.0"
    url = repository(Path(config.config_file_path).parent / "pyproject.toml", dict(os.environ))
    if url:
        config.repo_url = url
        config.repo_name = "/".join(url.split("/")[-2:])
    # mkdocstrings wraps a long signature (one parameter a line) only with Black or Ruff
    # installed; without them each is one line behind a scrollbar. Ruff is in the docs extra.
    if not any(importlib.util.find_spec(name) for name in ("black", "ruff")):
        log.warning("the API signatures cannot be wrapped: pip install -e '.[docs]' (for ruff)")
    return config


def on_page_markdown(markdown: str, **_: Any) -> str:
    from awsflock.cli import manual

    for marker, function in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, getattr(manual, function)())
    return markdown
