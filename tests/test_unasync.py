"""scripts/unasync: the synchronous lock logic is what its asynchronous source makes, and a
sync file edited by hand (or a source edited without running it) fails the check."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script():
    loader = importlib.machinery.SourceFileLoader("unasync", str(ROOT / "scripts" / "unasync"))
    spec = importlib.util.spec_from_loader("unasync", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("source", "sync"),
    [
        ("    async def step(self) -> Grant:\n", "    def step(self) -> Grant:\n"),
        ("        got = await run.step()\n", "        got = run.step()\n"),
        ("    async with lock:\n", "    with lock:\n"),
        ("    async for x in xs:\n", "    for x in xs:\n"),
        ("store: AsyncLockStore,\n", "store: LockStore,\n"),
        (
            "from awsflock.lock.acquisition_async import A\n",
            "from awsflock.lock.acquisition import A\n",
        ),
        ("await clock.sleep_async(1)\n", "clock.sleep(1)\n"),
        ("def __aenter__(self):\n", "def __enter__(self):\n"),
        ("    await asyncio.shield(f(x))  # sync: f(x)\n", "    f(x)\n"),
        ("import asyncio  # async only\n", None),
        # Names that only look alike are left alone.
        ("asyncio.run(x)\n", "asyncio.run(x)\n"),
        ("async_mode = 1\n", "async_mode = 1\n"),
        ("awaited = wait_async_later\n", "awaited = wait_async_later\n"),
    ],
)
def test_the_rules(source, sync):
    assert _script().unasync_line(source) == sync


def test_the_sync_files_are_what_their_sources_make():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "unasync"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_a_stale_sync_file_fails_the_check_naming_it(tmp_path, monkeypatch, capsys):
    script = _script()
    lock = tmp_path / "awsflock" / "lock"
    lock.mkdir(parents=True)
    source = lock / "thing_async.py"
    source.write_text(
        '"""A thing."""\n\n\nasync def f(store: AsyncLockStore) -> None:\n    await store.take()\n'
    )
    monkeypatch.setattr(script, "ROOT", tmp_path)
    monkeypatch.setattr(script, "SOURCES", ["awsflock/lock/thing_async.py"])
    assert script.main([]) == 0  # writes thing.py
    made = (lock / "thing.py").read_text()
    assert "def f(store: LockStore) -> None:\n    store.take()\n" in made
    assert made.startswith("# Made from thing_async.py by scripts/unasync")
    assert script.main(["--check"]) == 0
    (lock / "thing.py").write_text(made.replace("store.take()", "store.take(1)"))
    assert script.main(["--check"]) == 1
    said = capsys.readouterr().err
    assert "awsflock/lock/thing.py differ from what their *_async.py sources make" in said
    assert "-    store.take(1)" in said and "+    store.take()" in said
