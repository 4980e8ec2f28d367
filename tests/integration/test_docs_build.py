"""`scripts/docs build`, the docs check CI runs, on a copy of the docs: it fails on every
warning (a planted broken anchor)."""

from __future__ import annotations

import os
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

