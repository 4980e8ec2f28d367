"""The Action's committed bundle is the build of its sources, and action.yml says what the docs
say (tests/integration/test_action.py runs it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
GUIDE = ROOT / "docs" / "guides" / "github-action.md"


def test_the_committed_bundle_is_the_build_of_the_sources(tmp_path):
    esbuild = ROOT / "action" / "node_modules" / "esbuild"
    if shutil.which("node") is None or not esbuild.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail("CI must build the action: run scripts/test (npm ci --prefix action)")
        pytest.skip("needs node and action/node_modules (scripts/test installs them)")
    subprocess.run(["node", str(ROOT / "action" / "build.mjs"), str(tmp_path)], check=True)
    built = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    committed = {p.name: p.read_bytes() for p in (ROOT / "action" / "dist").iterdir()}
    assert built.keys() == committed.keys() == {"main.js", "post.js"}
    stale = [name for name in built if built[name] != committed[name]]
    assert not stale, f"action/dist/{stale} is not the build of action/src: run npm run build"


def install_key(root: Path, version: str = "", store: str = "") -> str:
    """The tool cache's name for what the action would install from ``root`` (or PyPI)."""
    script = f"require({str(ROOT / 'action/src/awsflock.js')!r}).installKey"
    done = subprocess.run(
        ["node", "-p", f"{script}({version!r}, {store!r}, {str(root)!r})"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(shutil.which("node") is None, reason="the action runs on node")
def test_the_install_cache_key_changes_with_the_awsflock_it_would_install(tmp_path):
    (tmp_path / "awsflock" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "awsflock"\nversion = "0.3.0"\n')
    module = tmp_path / "awsflock" / "lease.py"
    module.write_text("GRANT = 1\n")
    first = install_key(tmp_path)
    assert first.startswith("0.3.0-src-")
    (tmp_path / "awsflock" / "__pycache__" / "lease.cpython-311.pyc").write_bytes(b"\0")
    assert install_key(tmp_path) == first  # byte-code is not what it installs
    module.write_text("GRANT = 2\n")  # the same version, other code (a moved v1 tag)
    changed = install_key(tmp_path)
    assert changed.startswith("0.3.0-src-") and changed != first
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "awsflock"\nversion = "0.3.1"\n')
    assert install_key(tmp_path).startswith("0.3.1-src-")
    # A release from PyPI (the version input), and the extra a store needs.
    assert install_key(tmp_path, "0.3.0") == "0.3.0"
    assert install_key(tmp_path, "0.3.0", "postgresql://db/ops") == "0.3.0postgres"


def test_action_yml_runs_both_steps_on_node_with_post_always():
    runs = ACTION["runs"]
    assert re.fullmatch(r"node(2\d|[3-9]\d)", runs["using"])
    assert (ROOT / runs["main"]).is_file() and (ROOT / runs["post"]).is_file()
    assert runs["post-if"] == "always()"


def documented(heading: str) -> set[str]:
    """The names in the first column of the table under ``## heading`` in the guide."""
    text = GUIDE.read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z-]+)` \|", section, re.M))


def test_every_input_and_output_is_documented_and_nothing_else():
    assert documented("Inputs") == set(ACTION["inputs"])
    assert documented("Outputs") == set(ACTION["outputs"])


def test_the_documented_defaults_are_action_ymls():
    text = GUIDE.read_text()
    for name, spec in ACTION["inputs"].items():
        row = re.search(rf"^\| `{name}` \|([^|]*)\|", text, re.M)
        assert row is not None, name
        default = str(spec.get("default", ""))
        shown = row.group(1).strip()
        assert (shown == f"`{default}`") if default else shown in ("", "—", "required"), name


def test_the_action_tag_the_docs_use_is_the_one_a_release_moves():
    release = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    major = release["env"]["ACTION_MAJOR_TAG"]
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
    refs = {
        ref
        for page in pages
        for ref in re.findall(r"uses: OWNER/awsflock@(<[^>]+>|[\w.-]+)", page.read_text())
    }
    assert major in refs
    # Else only a commit, as a full SHA or a placeholder for one ("<full commit SHA>").
    others = {r for r in refs if r != major and not re.fullmatch(r"[0-9a-f]{40}", r)}
    assert others and all(re.fullmatch(r"<.*\bSHA>", r) for r in others), others
