"""The docs site's source as MkDocs reads it: nested lists and paragraphs inside list items are
indented four spaces (Python-Markdown flattens two); the build hook shows the version, links the
repository named in one place, and warns when the API signatures cannot be wrapped.
(tests/integration/test_docs_build.py builds the site.)"""

from __future__ import annotations

import importlib.util
import logging
import re
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
ITEM = re.compile(r"^ *(?:[-*+]|\d+[.)]) ")


def load_hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("awsflock_docs_hooks", ROOT / "docs/hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def misindented(text: str) -> list[str]:
    """Lines Python-Markdown would take out of their list: a list item, or the first line of a
    block after a blank line, indented by other than a multiple of four spaces."""
    found, fenced, previous = [], False, ""
    for line in text.splitlines():
        if re.match(r"^\s*(```|~~~)", line):
            fenced, previous = not fenced, line
            continue
        indent = len(line) - len(line.lstrip(" "))
        starts_block = bool(ITEM.match(line)) or (not previous.strip() and line.strip())
        if not fenced and starts_block and indent % 4:
            found.append(line)
        previous = line
    return found


def test_a_two_space_nested_list_is_found():
    assert misindented("- job summary:\n  - the wait\n") == ["  - the wait"]
    assert misindented("- item\n\n  more of the item\n") == ["  more of the item"]
    assert misindented("- item\n    - nested\n\n    more\n```\n  - code\n```\n") == []


@pytest.mark.parametrize(
    "page", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))
)
def test_every_nested_list_on_the_site_is_indented_four_spaces(page):
    assert misindented((ROOT / page).read_text()) == []


def pyproject(tmp_path: Path, urls: str = "") -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_text(f'[project]\nname = "awsflock"\n{urls}\n[tool.x]\nRepository = "no"\n')
    return path


def test_the_repository_link_comes_from_pyproject_first_then_githubs_build(tmp_path):
    hooks = load_hooks()
    named = pyproject(tmp_path, '[project.urls]\nRepository = "https://github.com/acme/awsflock/"')
    github = {"GITHUB_REPOSITORY": "ci/awsflock", "GITHUB_SERVER_URL": "https://ghe.example"}
    assert hooks.repository(named, github) == "https://github.com/acme/awsflock"
    assert hooks.repository(pyproject(tmp_path), github) == "https://ghe.example/ci/awsflock"
    assert hooks.repository(pyproject(tmp_path), {}) == ""


def site_config(tmp_path: Path, urls: str = "") -> Any:
    pyproject(tmp_path, urls)
    return SimpleNamespace(
        config_file_path=str(tmp_path / "mkdocs.yml"), copyright=None, repo_url=None
    )


def test_the_site_shows_the_version_and_links_the_repository(tmp_path, monkeypatch):
    from importlib.metadata import version

    monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
    hooks = load_hooks()
    config = hooks.on_config(site_config(tmp_path))
    assert config.copyright.startswith(f"awsflock {version('awsflock')} ")
    assert config.repo_url is None  # not known: no link rather than a made-up one
    urls = '[project.urls]\nRepository = "https://github.com/acme/awsflock"'
    config = hooks.on_config(site_config(tmp_path, urls))
    assert config.repo_url == "https://github.com/acme/awsflock"
    assert config.repo_name == "acme/awsflock"


def test_a_build_that_cannot_wrap_the_api_signatures_warns(tmp_path, monkeypatch, caplog):
    hooks = load_hooks()
    with caplog.at_level(logging.WARNING, logger="mkdocs"):
        hooks.on_config(site_config(tmp_path))
        assert caplog.records == []
        monkeypatch.setattr(hooks.importlib.util, "find_spec", lambda name: None)
        hooks.on_config(site_config(tmp_path))
    [warning] = caplog.records
    assert warning.name.startswith("mkdocs.") and "ruff" in warning.getMessage()
