"""`scripts/docs build`, the docs check CI runs, on a copy of the docs: it fails on every
warning (a planted broken anchor), ships no build hook, and wraps the long API signatures."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = ROOT / ".venv" / "bin" / "mkdocs"


@pytest.fixture
def docs_copy(tmp_path: Path) -> Path:
    if not MKDOCS.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("CI builds the docs: scripts/test installs the docs extra into .venv")
        pytest.skip("needs MkDocs in .venv (pip install -e '.[docs]')")
    copy = tmp_path / "checkout"
    (copy / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "docs", copy / "scripts" / "docs")
    for name in ("mkdocs.yml", "pyproject.toml"):
        shutil.copy(ROOT / name, copy / name)
    shutil.copytree(ROOT / "docs", copy / "docs")
    for name in (".venv", "awsflock"):
        (copy / name).symlink_to(ROOT / name)
    return copy


def build(checkout: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_REPOSITORY"}
    return subprocess.run(
        [str(checkout / "scripts" / "docs"), "build"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_broken_anchor_fails_the_docs_build(docs_copy):
    page = docs_copy / "docs" / "guides" / "cron.md"
    page.write_text(page.read_text() + "\nSee [there](../performance.md#no-such-section).\n")
    done = build(docs_copy)
    assert done.returncode != 0, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "'#no-such-section'" in said and "Aborted with 1 warnings" in said, said


def test_the_built_site_wraps_api_signatures_and_ships_no_hook(docs_copy):
    done = build(docs_copy)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stdout + done.stderr
    site = docs_copy / "site"
    assert (site / "index.html").is_file() and not (site / "hooks.py").exists()
    page = (site / "reference" / "api" / "index.html").read_text()
    signatures = [
        html.unescape(re.sub(r"<[^>]+>", "", block))
        for block in re.findall(r'<div class="doc-signature[^>]*>(.*?)</div>', page, re.S)
    ]
    assert len(signatures) > 20
    lock_table = next(s for s in signatures if s.startswith("LockTable("))
    assert '\n    table_name: str = "awsflock",\n' in lock_table  # one parameter a line
    longest = max((line for s in signatures for line in s.splitlines()), key=len)
    assert len(longest) <= 80, longest
